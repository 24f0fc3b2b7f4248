package rootcacertpublisher

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// Every active namespace gets kube-root-ca.crt with the CA; a changed or
// deleted copy comes back.
func TestPublishesRootCA(t *testing.T) {
	st := storetest.NewStore(t)
	reg := builtin.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	if _, err := reg.Create(ctx, st, store.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}); err != nil {
		t.Fatal(err)
	}
	nss, cms := store.NewInformer(st, store.Namespaces), store.NewInformer(st, store.ConfigMaps)
	c := New(st, reg, nss, cms, []byte(ca))
	for _, i := range []*store.Informer{nss, cms} {
		go i.Run(ctx)
		i.WaitForSync(ctx)
	}
	go c.Run(ctx, 1)
	published := func() error {
		o, err := st.Get(ctx, store.ConfigMaps, "team", ConfigMapName)
		if err != nil {
			return err
		}
		if got := o.(*corev1.ConfigMap).Data[RootCAKey]; got != ca {
			return fmt.Errorf("ca.crt is %q", got)
		}
		return nil
	}
	storetest.Eventually(t, 10*time.Second, published)
	o, _ := st.Get(ctx, store.ConfigMaps, "team", ConfigMapName)
	cm := o.(*corev1.ConfigMap)
	cm.Data[RootCAKey] = "forged"
	if _, err := st.Update(ctx, store.ConfigMaps, cm); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, published)
	if _, err := st.Delete(ctx, store.ConfigMaps, "team", ConfigMapName, ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, published)
}
