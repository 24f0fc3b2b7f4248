package persistentvolume

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

// syncClaimProtection is the pvc-protection controller's processPVC: a
// claim being deleted loses its kubernetes.io/pvc-protection finalizer
// (and is then deleted) once no pod of its namespace that uses it is
// still running or about to (a pod counts until it is Succeeded, Failed
// or gone from the store).
func (c *Controller) syncClaimProtection(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if !ctrlutil.HasFinalizer(pvc, core.PVCProtectionFinalizer) {
		return nil
	}
	if inUse, err := c.claimInUse(ctx, pvc); err != nil || inUse {
		return err
	}
	return c.removeFinalizer(ctx, core.PersistentVolumeClaims, pvc.Namespace, pvc.Name, pvc.UID, core.PVCProtectionFinalizer)
}

// claimInUse reports whether a pod that has not finished uses pvc: from
// the informer, and when it knows none, from a consistent list of the
// store (a pod just created may not be in the informer yet), as the
// pvc-protection controller asks its informer and then the apiserver.
func (c *Controller) claimInUse(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (bool, error) {
	if podsUse(c.pods.List(pvc.Namespace, nil), pvc.Name) {
		return true, nil
	}
	pods, _, err := c.s.List(ctx, store.Pods, pvc.Namespace)
	if err != nil {
		return false, err
	}
	return podsUse(pods, pvc.Name), nil
}

// podsUse reports whether a pod of pods that has not finished uses claim.
func podsUse(pods []store.Object, claim string) bool {
	for _, o := range pods {
		pod := o.(*corev1.Pod)
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, name := range podClaimNames(pod) {
			if name == claim {
				return true
			}
		}
	}
	return false
}

// syncVolumeProtection is the pv-protection controller's processPV: a
// volume being deleted loses its kubernetes.io/pv-protection finalizer
// once it is not Bound to a claim.
func (c *Controller) syncVolumeProtection(ctx context.Context, pv *corev1.PersistentVolume) error {
	if !ctrlutil.HasFinalizer(pv, core.PVProtectionFinalizer) || pv.Status.Phase == corev1.VolumeBound {
		if pv.Status.Phase == corev1.VolumeBound && pv.Spec.ClaimRef != nil {
			// Its claim may be gone: the volume is Released then.
			if o, ok := c.claims.Get(pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name); !ok || (pv.Spec.ClaimRef.UID != "" && o.GetUID() != pv.Spec.ClaimRef.UID) {
				return c.setVolumePhase(ctx, pv, corev1.VolumeReleased, "")
			}
		}
		return nil
	}
	return c.removeFinalizer(ctx, core.PersistentVolumes, "", pv.Name, pv.UID, core.PVProtectionFinalizer)
}

// removeFinalizer drops finalizer f from the object; the registry deletes
// an object marked for deletion whose last finalizer goes.
func (c *Controller) removeFinalizer(ctx context.Context, r store.Resource, ns, name string, uid types.UID, f string) error {
	_, err := c.reg.GuaranteedUpdate(ctx, c.s, r, ns, name, store.NewUIDPreconditions(string(uid)), func(o store.Object) (store.Object, error) {
		ctrlutil.RemoveFinalizer(o, f)
		return o, nil
	})
	return ignoreNotFound(err)
}
