package persistentvolume

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/registry/storage"
	"github.com/orca-edge/orca/controlplane/store"
)

// Event reasons, as Kubernetes' PV controller's.
const (
	EventWaitForFirstConsumer  = "WaitForFirstConsumer"
	EventFailedBinding         = "FailedBinding"
	EventExternalProvisioning  = "ExternalProvisioning"
	EventProvisioningFailed    = "ProvisioningFailed"
	EventProvisioningSucceeded = "ProvisioningSucceeded"
	EventClaimLost             = "ClaimLost"
	EventVolumeDelete          = "VolumeDelete"
	EventVolumeFailedDelete    = "VolumeFailedDelete"
	EventVolumeFailedRecycle   = "VolumeFailedRecycle"
)

func (c *Controller) syncClaimKey(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	o, ok := c.claims.Get(ns, name)
	if !ok {
		return nil
	}
	pvc := o.(*corev1.PersistentVolumeClaim)
	if pvc.DeletionTimestamp != nil {
		return c.syncClaimProtection(ctx, pvc)
	}
	if pvc.Spec.VolumeName == "" {
		return c.syncUnboundClaim(ctx, pvc)
	}
	return c.syncBoundClaim(ctx, pvc)
}

// class returns the claim's StorageClass, nil when it names none or one
// that does not exist.
func (c *Controller) class(name string) *storagev1.StorageClass {
	if name == "" {
		return nil
	}
	o, ok := c.classes.Get("", name)
	if !ok {
		return nil
	}
	return o.(*storagev1.StorageClass)
}

// syncUnboundClaim is the PV controller's syncUnboundClaim: a claim
// without storageClassName gets the default class (retroactively); one of
// a WaitForFirstConsumer class waits for the scheduler's selected node;
// then it binds to the best matching volume, or a volume is provisioned
// for it (ours) or awaited (another provisioner, or none).
func (c *Controller) syncUnboundClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Spec.StorageClassName == nil && pvc.Annotations[corev1.BetaStorageClassAnnotation] == "" {
		if def := storage.DefaultClass(c.classList()); def != nil {
			_, err := c.reg.GuaranteedUpdate(ctx, c.s, core.PersistentVolumeClaims, pvc.Namespace, pvc.Name, store.NewUIDPreconditions(string(pvc.UID)), func(o store.Object) (store.Object, error) {
				p := o.(*corev1.PersistentVolumeClaim)
				if p.Spec.StorageClassName == nil {
					p.Spec.StorageClassName = &def.Name
				}
				return p, nil
			})
			return ignoreNotFound(err)
		}
	}
	className := core.PersistentVolumeClaimClass(pvc)
	sc := c.class(className)
	nodeName := pvc.Annotations[core.AnnSelectedNode]
	if sc != nil && sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer && nodeName == "" {
		c.eventOnce(pvc, corev1.EventTypeNormal, EventWaitForFirstConsumer, "waiting for first consumer to be created before binding")
		return c.setClaimPhase(ctx, pvc, corev1.ClaimPending, nil)
	}
	var node *corev1.Node
	if nodeName != "" {
		if o, ok := c.nodes.Get("", nodeName); ok {
			node = o.(*corev1.Node)
		}
	}
	if pv := FindMatchingVolume(pvc, c.volumeList(), node); pv != nil {
		return c.bind(ctx, pv, pvc)
	}
	switch {
	case sc != nil && IsLocalPathProvisioner(sc.Provisioner):
		return c.provision(ctx, pvc, sc, nodeName, node)
	case sc != nil:
		c.eventOnce(pvc, corev1.EventTypeNormal, EventExternalProvisioning, fmt.Sprintf("Waiting for a volume to be created either by the external provisioner '%s' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.", sc.Provisioner))
	case className == "":
		c.eventOnce(pvc, corev1.EventTypeNormal, EventFailedBinding, "no persistent volumes available for this claim and no storage class is set")
	default:
		c.eventOnce(pvc, corev1.EventTypeWarning, EventProvisioningFailed, fmt.Sprintf("storageclass.storage.k8s.io %q not found", className))
	}
	return c.setClaimPhase(ctx, pvc, corev1.ClaimPending, nil)
}

// syncBoundClaim is the PV controller's syncBoundClaim: the claim names a
// volume; the volume is bound to it (its claimRef written when the claim
// was pre-bound by the user), then both are marked Bound. A volume that
// is gone makes a Bound claim Lost.
func (c *Controller) syncBoundClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	o, ok := c.volumes.Get("", pvc.Spec.VolumeName)
	if !ok {
		if pvc.Status.Phase == corev1.ClaimBound || pvc.Status.Phase == corev1.ClaimLost {
			if pvc.Status.Phase != corev1.ClaimLost {
				c.rec.Event(pvc, "", corev1.EventTypeWarning, EventClaimLost, "Bound claim has lost its PersistentVolume. Data on the volume is lost!")
			}
			return c.setClaimPhase(ctx, pvc, corev1.ClaimLost, nil)
		}
		c.eventOnce(pvc, corev1.EventTypeWarning, EventFailedBinding, fmt.Sprintf("volume %q not found", pvc.Spec.VolumeName))
		return c.setClaimPhase(ctx, pvc, corev1.ClaimPending, nil)
	}
	pv := o.(*corev1.PersistentVolume)
	if ref := pv.Spec.ClaimRef; ref != nil && !refersTo(ref, pvc) {
		c.eventOnce(pvc, corev1.EventTypeWarning, EventFailedBinding, fmt.Sprintf("volume %q already bound to a different claim.", pv.Name))
		phase := corev1.ClaimPending
		if pvc.Status.Phase == corev1.ClaimBound || pvc.Status.Phase == corev1.ClaimLost {
			phase = corev1.ClaimLost
		}
		return c.setClaimPhase(ctx, pvc, phase, nil)
	}
	return c.bind(ctx, pv, pvc)
}

// refersTo reports whether a volume's claimRef names pvc (a claimRef
// without uid, written by a user pre-binding a volume, names any claim of
// that name).
func refersTo(ref *corev1.ObjectReference, pvc *corev1.PersistentVolumeClaim) bool {
	return ref.Namespace == pvc.Namespace && ref.Name == pvc.Name && (ref.UID == "" || ref.UID == pvc.UID)
}

// claimRef is the reference a bound volume holds to pvc.
func claimRef(pvc *corev1.PersistentVolumeClaim) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name,
		UID: pvc.UID, ResourceVersion: pvc.ResourceVersion}
}

// bind binds pv and pvc as the PV controller's bind: the volume's
// claimRef (and phase Bound) first, then the claim's volumeName and
// annotations, then the claim's phase Bound with the volume's capacity
// and access modes. Each step writes only what differs; a volume bound
// to another claim meanwhile is a Conflict (the claim is synced again).
func (c *Controller) bind(ctx context.Context, pv *corev1.PersistentVolume, pvc *corev1.PersistentVolumeClaim) error {
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != pvc.UID || ref.Namespace != pvc.Namespace || ref.Name != pvc.Name {
		out, err := c.updateVolume(ctx, pv.Name, func(v *corev1.PersistentVolume) error {
			if v.Spec.ClaimRef != nil && !refersTo(v.Spec.ClaimRef, pvc) {
				return apierrors.NewConflict(core.PersistentVolumes.GroupResource(), v.Name, fmt.Errorf("volume already bound to claim %s/%s", v.Spec.ClaimRef.Namespace, v.Spec.ClaimRef.Name))
			}
			if v.Spec.ClaimRef == nil {
				metav1.SetMetaDataAnnotation(&v.ObjectMeta, core.AnnBoundByController, "yes")
			}
			v.Spec.ClaimRef = claimRef(pvc)
			return nil
		})
		if err != nil {
			return fmt.Errorf("bind volume %s to claim %s/%s: %w", pv.Name, pvc.Namespace, pvc.Name, err)
		}
		pv = out
	}
	if err := c.setVolumePhase(ctx, pv, corev1.VolumeBound, ""); err != nil {
		return err
	}
	if pvc.Spec.VolumeName != pv.Name || pvc.Annotations[core.AnnBindCompleted] != "yes" {
		_, err := c.reg.GuaranteedUpdate(ctx, c.s, core.PersistentVolumeClaims, pvc.Namespace, pvc.Name, store.NewUIDPreconditions(string(pvc.UID)), func(o store.Object) (store.Object, error) {
			p := o.(*corev1.PersistentVolumeClaim)
			if p.Spec.VolumeName == "" {
				metav1.SetMetaDataAnnotation(&p.ObjectMeta, core.AnnBoundByController, "yes")
				p.Spec.VolumeName = pv.Name
			}
			metav1.SetMetaDataAnnotation(&p.ObjectMeta, core.AnnBindCompleted, "yes")
			return p, nil
		})
		if err != nil {
			return fmt.Errorf("bind claim %s/%s to volume %s: %w", pvc.Namespace, pvc.Name, pv.Name, ignoreNotFound(err))
		}
	}
	return c.setClaimPhase(ctx, pvc, corev1.ClaimBound, pv)
}

// setClaimPhase writes the claim's phase (with the bound volume's
// capacity and access modes when pv is set) when it differs.
func (c *Controller) setClaimPhase(ctx context.Context, pvc *corev1.PersistentVolumeClaim, phase corev1.PersistentVolumeClaimPhase, pv *corev1.PersistentVolume) error {
	want := pvc.Status.DeepCopy()
	want.Phase = phase
	if pv != nil {
		want.Capacity = corev1.ResourceList{corev1.ResourceStorage: pv.Spec.Capacity[corev1.ResourceStorage]}
		want.AccessModes = pv.Spec.AccessModes
	}
	if apiequality.Semantic.DeepEqual(want, &pvc.Status) {
		return nil
	}
	_, err := c.reg.GuaranteedUpdateStatus(ctx, c.s, core.PersistentVolumeClaims, pvc.Namespace, pvc.Name, store.NewUIDPreconditions(string(pvc.UID)), func(o store.Object) (store.Object, error) {
		p := o.(*corev1.PersistentVolumeClaim)
		p.Status.Phase = want.Phase
		if pv != nil {
			p.Status.Capacity, p.Status.AccessModes = want.Capacity, want.AccessModes
		}
		return p, nil
	})
	return ignoreNotFound(err)
}

// setVolumePhase writes the volume's phase and message when they differ.
func (c *Controller) setVolumePhase(ctx context.Context, pv *corev1.PersistentVolume, phase corev1.PersistentVolumePhase, msg string) error {
	if pv.Status.Phase == phase && pv.Status.Message == msg {
		return nil
	}
	_, err := c.reg.GuaranteedUpdateStatus(ctx, c.s, core.PersistentVolumes, "", pv.Name, store.NewUIDPreconditions(string(pv.UID)), func(o store.Object) (store.Object, error) {
		v := o.(*corev1.PersistentVolume)
		if v.Status.Phase != phase {
			now := metav1.Now()
			v.Status.LastPhaseTransitionTime = &now
		}
		v.Status.Phase, v.Status.Message = phase, msg
		return v, nil
	})
	return ignoreNotFound(err)
}

// updateVolume changes the main resource of volume name with mutate.
func (c *Controller) updateVolume(ctx context.Context, name string, mutate func(*corev1.PersistentVolume) error) (*corev1.PersistentVolume, error) {
	out, err := c.reg.GuaranteedUpdate(ctx, c.s, core.PersistentVolumes, "", name, nil, func(o store.Object) (store.Object, error) {
		v := o.(*corev1.PersistentVolume)
		if err := mutate(v); err != nil {
			return nil, err
		}
		return v, nil
	})
	if err != nil {
		return nil, err
	}
	return out.(*corev1.PersistentVolume), nil
}

// FindMatchingVolume returns the volume pvc should bind to among
// volumes, as the PV controller's findMatchingVolume: a volume pre-bound
// to pvc (its claimRef names it) first; else the smallest free volume
// (no claimRef, not being deleted) of the claim's class and volumeMode
// with every access mode the claim asks for, at least the storage it
// requests and labels its selector matches; when node is set (a
// WaitForFirstConsumer claim with a selected node), only volumes whose
// node affinity admits node. nil when none matches.
func FindMatchingVolume(pvc *corev1.PersistentVolumeClaim, volumes []*corev1.PersistentVolume, node *corev1.Node) *corev1.PersistentVolume {
	var best *corev1.PersistentVolume
	class := core.PersistentVolumeClaimClass(pvc)
	request := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	var sel labels.Selector = labels.Everything()
	if pvc.Spec.Selector != nil {
		s, err := metav1.LabelSelectorAsSelector(pvc.Spec.Selector)
		if err != nil {
			return nil
		}
		sel = s
	}
	for _, pv := range volumes {
		if pv.DeletionTimestamp != nil || core.PersistentVolumeClass(pv) != class {
			continue
		}
		if ref := pv.Spec.ClaimRef; ref != nil {
			if refersTo(ref, pvc) && VolumeFitsNode(pv, node) {
				return pv
			}
			continue
		}
		if pv.Status.Phase == corev1.VolumeReleased || pv.Status.Phase == corev1.VolumeFailed {
			continue
		}
		if volumeMode(pv.Spec.VolumeMode) != volumeMode(pvc.Spec.VolumeMode) || !hasAccessModes(pv.Spec.AccessModes, pvc.Spec.AccessModes) {
			continue
		}
		capacity := pv.Spec.Capacity[corev1.ResourceStorage]
		if capacity.Cmp(request) < 0 || !sel.Matches(labels.Set(pv.Labels)) || !VolumeFitsNode(pv, node) {
			continue
		}
		if best == nil {
			best = pv
			continue
		}
		if bc := best.Spec.Capacity[corev1.ResourceStorage]; capacity.Cmp(bc) < 0 {
			best = pv
		}
	}
	return best
}

// VolumeFitsNode reports whether pv's node affinity admits node (true
// when node is nil or pv has no required node affinity; false when the
// affinity cannot be parsed).
func VolumeFitsNode(pv *corev1.PersistentVolume, node *corev1.Node) bool {
	if node == nil || pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return true
	}
	ns, err := nodeaffinity.NewNodeSelector(pv.Spec.NodeAffinity.Required)
	return err == nil && ns.Match(node)
}

func volumeMode(m *corev1.PersistentVolumeMode) corev1.PersistentVolumeMode {
	if m == nil {
		return corev1.PersistentVolumeFilesystem
	}
	return *m
}

// hasAccessModes reports whether have holds every mode of want.
func hasAccessModes(have, want []corev1.PersistentVolumeAccessMode) bool {
	for _, m := range want {
		found := false
		for _, h := range have {
			if h == m {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func (c *Controller) volumeList() []*corev1.PersistentVolume {
	objs := c.volumes.List("", nil)
	out := make([]*corev1.PersistentVolume, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.PersistentVolume))
	}
	return out
}

func (c *Controller) classList() []*storagev1.StorageClass {
	objs := c.classes.List("", nil)
	out := make([]*storagev1.StorageClass, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*storagev1.StorageClass))
	}
	return out
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (c *Controller) syncVolumeKey(ctx context.Context, name string) error {
	o, ok := c.volumes.Get("", name)
	if !ok {
		return nil
	}
	pv := o.(*corev1.PersistentVolume)
	if pv.DeletionTimestamp != nil {
		return c.syncVolumeProtection(ctx, pv)
	}
	ref := pv.Spec.ClaimRef
	if ref == nil {
		return c.setVolumePhase(ctx, pv, corev1.VolumeAvailable, "")
	}
	var pvc *corev1.PersistentVolumeClaim
	if o, ok := c.claims.Get(ref.Namespace, ref.Name); ok {
		pvc = o.(*corev1.PersistentVolumeClaim)
		if ref.UID != "" && pvc.UID != ref.UID {
			pvc = nil // a new claim of the old name: ours is gone
		}
	}
	if pvc == nil && ref.UID != "" && pv.Status.Phase != corev1.VolumeReleased && pv.Status.Phase != corev1.VolumeFailed {
		// The informer may lag behind a claim just created: ask the store.
		if o, err := c.s.Get(ctx, core.PersistentVolumeClaims, ref.Namespace, ref.Name); err == nil && o.GetUID() == ref.UID {
			c.claimQueue.Add(ref.Namespace + "/" + ref.Name)
			return nil
		} else if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	switch {
	case pvc == nil && ref.UID == "":
		// Pre-bound to a claim that does not exist yet.
		return c.setVolumePhase(ctx, pv, corev1.VolumeAvailable, "")
	case pvc == nil:
		return c.reclaim(ctx, pv)
	case pvc.Spec.VolumeName == "":
		c.claimQueue.Add(store.KeyOf(pvc)) // the claim binds to us
		return c.setVolumePhase(ctx, pv, corev1.VolumeAvailable, "")
	case pvc.Spec.VolumeName == pv.Name:
		return c.setVolumePhase(ctx, pv, corev1.VolumeBound, "")
	case pv.Annotations[core.AnnBoundByController] == "yes":
		// The claim went to another volume: this one is free again.
		if _, err := c.updateVolume(ctx, pv.Name, func(v *corev1.PersistentVolume) error { v.Spec.ClaimRef = nil; return nil }); err != nil {
			return ignoreNotFound(err)
		}
		return nil
	default:
		return c.setVolumePhase(ctx, pv, corev1.VolumeReleased, "")
	}
}

// reclaim handles a volume whose claim is gone, as the PV controller's
// reclaimVolume: Released, then by its reclaim policy: Retain keeps it;
// Delete removes a local-path volume's directory on its node, then the
// volume; a volume of another kind cannot be deleted nor recycled
// (phase Failed with Kubernetes' message).
func (c *Controller) reclaim(ctx context.Context, pv *corev1.PersistentVolume) error {
	if pv.Status.Phase != corev1.VolumeReleased && pv.Status.Phase != corev1.VolumeFailed {
		if err := c.setVolumePhase(ctx, pv, corev1.VolumeReleased, ""); err != nil {
			return err
		}
		pv = pv.DeepCopy()
		pv.Status.Phase = corev1.VolumeReleased
	}
	switch pv.Spec.PersistentVolumeReclaimPolicy {
	case corev1.PersistentVolumeReclaimDelete:
		if !IsLocalPathProvisioner(pv.Annotations[core.AnnDynamicallyProvisioned]) {
			msg := fmt.Sprintf("error getting deleter volume plugin for volume %q: no deletable volume plugin matched", pv.Name)
			if pv.Status.Phase != corev1.VolumeFailed {
				c.rec.Event(pv, "", corev1.EventTypeWarning, EventVolumeFailedDelete, msg)
			}
			return c.setVolumePhase(ctx, pv, corev1.VolumeFailed, msg)
		}
		return c.deleteLocalVolume(ctx, pv)
	case corev1.PersistentVolumeReclaimRecycle:
		msg := fmt.Sprintf("No recycler plugin found for the volume %q", pv.Name)
		if pv.Status.Phase != corev1.VolumeFailed {
			c.rec.Event(pv, "", corev1.EventTypeWarning, EventVolumeFailedRecycle, msg)
		}
		return c.setVolumePhase(ctx, pv, corev1.VolumeFailed, msg)
	}
	return nil // Retain
}
