package serviceaccount

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

// StoreGetter reads bound objects from the store, one KV get each (no
// cache: a deleted pod's token stops working at once).
func StoreGetter(st *store.Store) Getter { return storeGetter{st} }

type storeGetter struct{ st *store.Store }

func (g storeGetter) GetServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	obj, err := g.st.Get(ctx, core.ServiceAccounts, namespace, name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.ServiceAccount), nil
}

func (g storeGetter) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	obj, err := g.st.Get(ctx, store.Pods, namespace, name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Pod), nil
}

func (g storeGetter) GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	obj, err := g.st.Get(ctx, store.Secrets, namespace, name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Secret), nil
}

func (g storeGetter) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	obj, err := g.st.Get(ctx, store.Nodes, "", name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Node), nil
}
