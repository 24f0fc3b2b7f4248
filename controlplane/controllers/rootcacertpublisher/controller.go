// Package rootcacertpublisher keeps the ConfigMap "kube-root-ca.crt" with
// the cluster CA bundle (key ca.crt) in every active namespace, as
// kube-controller-manager's root-ca-cert-publisher
// (pkg/controller/certificates/rootcacertpublisher): the kube-api-access
// volume of every pod projects it, so that a pod verifies the apiserver.
// A changed or deleted copy is put back.
package rootcacertpublisher

import (
	"context"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Name names the controller in logs and queue metrics.
const Name = "root-ca-cert-publisher"

// ConfigMapName is the published ConfigMap, RootCAKey its key.
const (
	ConfigMapName = "kube-root-ca.crt"
	RootCAKey     = "ca.crt"
)

// descriptionAnnotation is Kubernetes' annotation on the ConfigMap.
const descriptionAnnotation = "kubernetes.io/description"

const description = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. " +
	"No other usage is guaranteed across distributions of Kubernetes clusters."

// Controller publishes the CA bundle.
type Controller struct {
	s        *store.Store
	reg      *registry.Registry
	nss, cms *store.Informer
	rootCA   string
	queue    workqueue.TypedRateLimitingInterface[string] // namespace names
}

// New returns the controller publishing rootCA (PEM) over the Namespaces
// and ConfigMaps informers; writes go through reg's ConfigMap rules.
func New(s *store.Store, reg *registry.Registry, namespaces, configMaps *store.Informer, rootCA []byte) *Controller {
	c := &Controller{s: s, reg: reg, nss: namespaces, cms: configMaps, rootCA: string(rootCA), queue: ctrlutil.NewQueue(Name)}
	namespaces.AddHandler(store.Handler{
		OnAdd:    func(o store.Object) { c.queue.Add(o.GetName()) },
		OnUpdate: func(_, n store.Object) { c.queue.Add(n.GetName()) },
	})
	onCM := func(o store.Object) {
		if o.GetName() == ConfigMapName {
			c.queue.Add(o.GetNamespace())
		}
	}
	configMaps.AddHandler(store.Handler{OnUpdate: func(_, n store.Object) { onCM(n) }, OnDelete: onCM})
	return c
}

// Run publishes with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

func (c *Controller) sync(ctx context.Context, ns string) error {
	o, ok := c.nss.Get("", ns)
	if !ok {
		return nil
	}
	if n := o.(*corev1.Namespace); n.Status.Phase != corev1.NamespaceActive || n.DeletionTimestamp != nil {
		return nil
	}
	want := map[string]string{RootCAKey: c.rootCA}
	cur, ok := c.cms.Get(ns, ConfigMapName)
	if !ok {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ConfigMapName, Annotations: map[string]string{descriptionAnnotation: description}}, Data: want}
		_, err := c.reg.Create(ctx, c.s, store.ConfigMaps, cm)
		if err != nil && !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
			return fmt.Errorf("publish %s/%s: %w", ns, ConfigMapName, err)
		}
		return nil
	}
	cm := cur.(*corev1.ConfigMap)
	if reflect.DeepEqual(cm.Data, want) && len(cm.BinaryData) == 0 && cm.Annotations[descriptionAnnotation] == description {
		return nil
	}
	uid := cm.UID
	_, err := c.reg.GuaranteedUpdate(ctx, c.s, store.ConfigMaps, ns, ConfigMapName, &store.Preconditions{UID: &uid}, func(o store.Object) (store.Object, error) {
		cm := o.(*corev1.ConfigMap)
		cm.Data, cm.BinaryData = want, nil
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		cm.Annotations[descriptionAnnotation] = description
		return cm, nil
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("update %s/%s: %w", ns, ConfigMapName, err)
	}
	if apierrors.IsConflict(err) {
		return err
	}
	return nil
}
