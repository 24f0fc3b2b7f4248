package persistentvolume

import (
	"context"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/storage"
)

// DefaultClassName is the name of the default StorageClass, as k3s's.
const DefaultClassName = "local-path"

// DefaultClass returns the StorageClass the controller creates at start,
// as k3s's local-storage manifest: local-path, the default class
// (storageclass.kubernetes.io/is-default-class "true"), provisioner
// rancher.io/local-path, volumeBindingMode WaitForFirstConsumer, reclaim
// policy Delete.
func DefaultClass() *storagev1.StorageClass {
	return &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: DefaultClassName, Annotations: map[string]string{storage.IsDefaultClassAnnotation: "true"}},
		Provisioner:       RancherLocalPath,
		ReclaimPolicy:     new(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: new(storagev1.VolumeBindingWaitForFirstConsumer),
	}
}

// ensureDefaultClass creates DefaultClass unless a class of its name
// exists (a failure is logged; the next start tries again), as k3s
// applies its manifest at every start.
func (c *Controller) ensureDefaultClass(ctx context.Context) {
	if _, ok := c.classes.Get("", DefaultClassName); ok {
		return
	}
	if _, err := c.reg.Create(ctx, c.s, storage.StorageClasses, DefaultClass()); err != nil && !apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
		slog.Warn("create the default StorageClass", "name", DefaultClassName, "err", err)
	}
}
