package persistentvolume

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/registry/core"
)

// The local-path provisioner's names.
const (
	// LocalPathProvisioner is orca's provisioner name; RancherLocalPath,
	// rancher/local-path-provisioner's (k3s's), is served alike, and is
	// the one of the default class, so k3s manifests work unchanged.
	LocalPathProvisioner = "orca.dev/local-path"
	RancherLocalPath     = "rancher.io/local-path"
	// AnnNodeLocalStoragePath on a Node is the directory the node's agent
	// keeps local-path volumes under.
	AnnNodeLocalStoragePath = nodeapi.AnnLocalStoragePath
	// AnnLocalPathNode on a provisioned PV names the node its directory is
	// on (the node whose agent removes it on reclaim Delete).
	AnnLocalPathNode = "storage.orca.dev/local-path-node"
	// ParameterVolumeType is the class parameter choosing the PV's source,
	// as rancher's volumeType: "hostPath" (the default) or "local".
	ParameterVolumeType = "volumeType"
)

// deleteTimeout bounds one request to a node's agent to remove a volume.
const deleteTimeout = 30 * time.Second

// IsLocalPathProvisioner reports whether name is served by this
// controller's provisioner.
func IsLocalPathProvisioner(name string) bool {
	return name == LocalPathProvisioner || name == RancherLocalPath
}

// VolumeName is the name of the PV provisioned for a claim: "pvc-<uid>",
// as Kubernetes' provisioners name theirs.
func VolumeName(pvc *corev1.PersistentVolumeClaim) string { return "pvc-" + string(pvc.UID) }

// provision makes the volume of pvc on the node the scheduler selected,
// as rancher's local-path-provisioner's Provision: a PV pvc-<claim uid>
// of the claim's size, access modes and volumeMode, the class's reclaim
// policy and mount options, pre-bound to the claim (claimRef with uid),
// with a hostPath (DirectoryOrCreate; a local source with the class
// parameter volumeType: local) <root>/<pv>_<namespace>_<claim> and node
// affinity kubernetes.io/hostname In [node]. The directory is made by the
// node's agent when a pod using the claim starts there. A claim with no
// selected node (a class with volumeBindingMode Immediate) cannot be
// provisioned: ProvisioningFailed, "configuration error, no node was
// specified", as rancher's.
func (c *Controller) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim, sc *storagev1.StorageClass, nodeName string, node *corev1.Node) error {
	fail := func(msg string) error {
		c.eventOnce(pvc, corev1.EventTypeWarning, EventProvisioningFailed, fmt.Sprintf("failed to provision volume with StorageClass %q: %s", sc.Name, msg))
		return c.setClaimPhase(ctx, pvc, corev1.ClaimPending, nil)
	}
	if nodeName == "" {
		return fail("configuration error, no node was specified")
	}
	if node == nil {
		return fail(fmt.Sprintf("node %q not found", nodeName))
	}
	root := c.cfg.DefaultLocalStoragePath
	if root == "" {
		root = node.Annotations[AnnNodeLocalStoragePath]
	}
	if root == "" || !filepath.IsAbs(root) {
		return fail(fmt.Sprintf("node %q publishes no local storage path (annotation %s) and no --default-local-storage-path is set", nodeName, AnnNodeLocalStoragePath))
	}
	if _, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
		return fail("claim requests no storage")
	}
	name := VolumeName(pvc)
	if _, ok := c.volumes.Get("", name); ok {
		return nil // made already: its add event binds the claim
	}
	path := filepath.Join(root, name+"_"+pvc.Namespace+"_"+pvc.Name)
	reclaim := corev1.PersistentVolumeReclaimDelete
	if sc.ReclaimPolicy != nil {
		reclaim = *sc.ReclaimPolicy
	}
	source := corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: new(corev1.HostPathDirectoryOrCreate)}}
	if sc.Parameters[ParameterVolumeType] == "local" {
		source = corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}}
	}
	hostname := node.Labels[corev1.LabelHostname]
	if hostname == "" {
		hostname = node.Name
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			core.AnnDynamicallyProvisioned: sc.Provisioner,
			AnnLocalPathNode:               node.Name,
		}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: reclaim,
			StorageClassName:              sc.Name,
			VolumeMode:                    pvc.Spec.VolumeMode,
			MountOptions:                  sc.MountOptions,
			ClaimRef:                      claimRef(pvc),
			PersistentVolumeSource:        source,
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{hostname}}},
			}}}},
		},
	}
	if _, err := c.reg.Create(ctx, c.s, core.PersistentVolumes, pv); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return fail(err.Error())
	}
	c.rec.Event(pvc, "", corev1.EventTypeNormal, EventProvisioningSucceeded, fmt.Sprintf("Successfully provisioned volume %s", name))
	return nil
}

// localVolumePath returns the directory of a local-path volume.
func localVolumePath(pv *corev1.PersistentVolume) string {
	switch {
	case pv.Spec.HostPath != nil:
		return pv.Spec.HostPath.Path
	case pv.Spec.Local != nil:
		return pv.Spec.Local.Path
	}
	return ""
}

// deleteLocalVolume removes a Released local-path volume with reclaim
// policy Delete: its directory, by its node's agent, then the volume
// (kept by nothing once Released: pv-protection lets it go). A node that
// does not answer leaves the volume Released with a VolumeFailedDelete
// Event, and it is tried again with back-off.
func (c *Controller) deleteLocalVolume(ctx context.Context, pv *corev1.PersistentVolume) error {
	// The informer may not show the deletion of a sync just done yet.
	if cur, err := c.s.Get(ctx, core.PersistentVolumes, "", pv.Name); err != nil || cur.GetUID() != pv.UID || cur.GetDeletionTimestamp() != nil {
		return ignoreNotFound(err)
	}
	node := pv.Annotations[AnnLocalPathNode]
	if node != "" {
		if err := c.cfg.DeleteVolume(ctx, node, pv.Name, localVolumePath(pv)); err != nil {
			c.rec.Event(pv, "", corev1.EventTypeWarning, EventVolumeFailedDelete, fmt.Sprintf("remove the directory of volume %s on node %s: %v", pv.Name, node, err))
			return fmt.Errorf("delete volume %s: %w", pv.Name, err)
		}
	}
	_, err := c.reg.Delete(ctx, c.s, core.PersistentVolumes, "", pv.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pv.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete volume %s: %w", pv.Name, err)
	}
	return nil
}

// deleteOnNode is Config.DeleteVolume's default: a NATS request to the
// node's agent.
func (c *Controller) deleteOnNode(ctx context.Context, node, volume, path string) error {
	ctx, cancel := context.WithTimeout(ctx, deleteTimeout)
	defer cancel()
	return nodeapi.DeleteLocalVolume(ctx, c.s.Conn(), node, nodeapi.LocalVolumeDeleteRequest{Volume: volume, Path: path})
}
