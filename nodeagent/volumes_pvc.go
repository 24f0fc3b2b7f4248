package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
)

// annDynamicallyProvisioned on a PV names the provisioner that made it
// (registry/core.AnnDynamicallyProvisioned; the agent does not link the
// registry).
const annDynamicallyProvisioned = "pv.kubernetes.io/provisioned-by"

// localPathProvisioners are the provisioner names of the local-path
// provisioner (controlplane/controllers/persistentvolume): the agent makes
// and removes the directories of their volumes.
var localPathProvisioners = map[string]bool{"orca.dev/local-path": true, "rancher.io/local-path": true}

// localStoragePath is where this node keeps local-path volumes
// (Config.LocalStoragePath, default <DataDir>/storage), published on the
// Node as annotation nodeapi.AnnLocalStoragePath.
func (a *Agent) localStoragePath() string {
	if p := a.cfg.LocalStoragePath; p != "" {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
		return p
	}
	return filepath.Join(a.cfg.DataDir, "storage")
}

// localVolumeRecords is <DataDir>/local-volumes: one file per local-path
// volume the agent made a directory for, named after the PV and holding
// the directory's path, so that only a directory the agent made is ever
// removed.
func (a *Agent) localVolumeRecords() string { return filepath.Join(a.cfg.DataDir, "local-volumes") }

// setupClaim prepares a persistentVolumeClaim volume, as the kubelet's
// volume manager for local and hostPath PVs: the claim (read through the
// API: the Node authorizer lets a node read the claims of its pods) must
// be Bound, its PersistentVolume's node affinity must admit this node, and
// its hostPath or local path is the volume's directory. A local-path
// volume's directory is made here (mode 0777, as rancher's helper pod's
// mkdir -m 0777 -p) before the pod's first container starts, and
// recorded for its removal on reclaim Delete (serveVolumeDelete); other
// hostPath volumes are checked against their type. readOnly in the
// claim's volume source makes every mount of it read-only.
func (w *podWorker) setupClaim(ctx context.Context, v *corev1.Volume) (*volume, error) {
	src := v.PersistentVolumeClaim
	o, err := w.a.api.Get(ctx, store.PersistentVolumeClaims, w.pod.Namespace, src.ClaimName)
	if err != nil {
		return nil, fmt.Errorf("get persistentvolumeclaim %q: %w", src.ClaimName, err)
	}
	pvc := o.(*corev1.PersistentVolumeClaim)
	if pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
		return nil, fmt.Errorf("persistentvolumeclaim %q is not bound (phase %s)", src.ClaimName, pvc.Status.Phase)
	}
	o, err = w.a.api.Get(ctx, store.PersistentVolumes, "", pvc.Spec.VolumeName)
	if err != nil {
		return nil, fmt.Errorf("get persistentvolume %q of claim %q: %w", pvc.Spec.VolumeName, src.ClaimName, err)
	}
	pv := o.(*corev1.PersistentVolume)
	if ref := pv.Spec.ClaimRef; ref == nil || ref.Namespace != pvc.Namespace || ref.Name != pvc.Name || (ref.UID != "" && ref.UID != pvc.UID) {
		return nil, fmt.Errorf("persistentvolume %q is not bound to claim %q", pv.Name, src.ClaimName)
	}
	if na := pv.Spec.NodeAffinity; na != nil && na.Required != nil {
		sel, err := nodeaffinity.NewNodeSelector(na.Required)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: w.a.cfg.NodeName, Labels: labels.Set(w.a.nodeLabels())}}
		if err != nil || !sel.Match(node) {
			return nil, fmt.Errorf("persistentvolume %q has volume node affinity conflict with node %s", pv.Name, w.a.cfg.NodeName)
		}
	}
	vol := &volume{name: v.Name, kind: volHostPath, src: v, readOnly: src.ReadOnly}
	switch {
	case pv.Spec.HostPath != nil:
		vol.path = pv.Spec.HostPath.Path
	case pv.Spec.Local != nil:
		vol.path = pv.Spec.Local.Path
	default:
		return nil, fmt.Errorf("persistentvolume %q: only hostPath and local volumes are supported by orca", pv.Name)
	}
	if localPathProvisioners[pv.Annotations[annDynamicallyProvisioned]] {
		if err := w.a.makeLocalVolume(pv.Name, vol.path); err != nil {
			return nil, err
		}
		return vol, nil
	}
	if pv.Spec.HostPath != nil {
		notDir, err := checkHostPath(pv.Spec.HostPath)
		vol.notDir = notDir
		return vol, err
	}
	if _, err := os.Stat(vol.path); err != nil {
		return nil, fmt.Errorf("local volume %q: %w", pv.Name, err)
	}
	return vol, nil
}

// makeLocalVolume records, then makes, the directory of local-path volume
// pv (the record first: a directory is never left without one).
func (a *Agent) makeLocalVolume(pv, path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("local-path volume %q: bad path %q", pv, path)
	}
	if err := os.MkdirAll(a.localVolumeRecords(), 0o700); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(a.localVolumeRecords(), pv), []byte(path)); err != nil {
		return fmt.Errorf("local-path volume %q: record: %w", pv, err)
	}
	if err := os.MkdirAll(path, 0o777); err != nil {
		return fmt.Errorf("local-path volume %q: %w", pv, err)
	}
	return os.Chmod(path, 0o777) // whatever the umask
}

// writeFileAtomic writes data to path through a temporary file and a
// rename.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// deleteLocalVolume removes the directory the agent made for local-path
// volume pv, if it made one (its record says where), then the record. A
// volume it has no record of was never set up here: nothing to remove.
// The record must name path, so a request cannot redirect the removal.
func (a *Agent) deleteLocalVolume(pv, path string) error {
	if pv == "" || strings.ContainsAny(pv, "/\x00") || pv == "." || pv == ".." {
		return fmt.Errorf("bad volume name %q", pv)
	}
	rec := filepath.Join(a.localVolumeRecords(), pv)
	data, err := os.ReadFile(rec)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if string(data) != path {
		return fmt.Errorf("volume %q was made at %s, not %s", pv, data, path)
	}
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	a.log.Info("local volume removed", "volume", pv, "path", path)
	return os.Remove(rec)
}

// serveVolumeDelete answers a nodeapi.LocalVolumeDeleteRequest.
func (a *Agent) serveVolumeDelete(m *nats.Msg) {
	var req nodeapi.LocalVolumeDeleteRequest
	var rep nodeapi.LocalVolumeDeleteReply
	if err := json.Unmarshal(m.Data, &req); err != nil {
		rep.Error = "bad request: " + err.Error()
	} else if err := a.deleteLocalVolume(req.Volume, req.Path); err != nil {
		rep.Error = err.Error()
	}
	data, _ := json.Marshal(rep)
	if err := m.Respond(data); err != nil {
		a.log.Warn("answer a volume delete request", "volume", req.Volume, "err", err)
	}
}
