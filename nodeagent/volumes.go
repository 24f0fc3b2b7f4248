package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/runtimes"
)

// Volume kinds: the directory of each under a pod's volume directory
// <DataDir>/volumes/<pod uid>/<kind>/<volume name>, as the kubelet's
// /var/lib/kubelet/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>.
const (
	volEmptyDir  = "empty-dir"
	volConfigMap = "configmap"
	volSecret    = "secret"
	volDownward  = "downward-api"
	volProjected = "projected"
	volHostPath  = "host-path" // nothing under the pod: the node's path itself
	// volSubPaths holds the bind mounts of subPaths (bindSubPath).
	volSubPaths = "volume-subpaths"
)

// defaultVolumeMode is the mode of API-data volume files when neither the
// item nor the volume's defaultMode sets one (the API's default for
// configMap, secret, downwardAPI and projected volumes).
const defaultVolumeMode = 0o644

// podVolumes is what the agent prepared for one pod's volumes. It belongs
// to the pod's worker goroutine.
type podVolumes struct {
	ready       bool
	tornDown    bool // the pod ended and its volumes were removed
	vols        map[string]*volume
	nextRefresh time.Time // when configMaps and secrets are read again
	warned      map[string]bool
}

// volume is one prepared volume of a pod.
type volume struct {
	name, kind string
	// path is the volume's root on the node: a directory, or for a
	// hostPath of a file, socket or device, that file.
	path string
	// apiData marks configMap, secret, downwardAPI and projected volumes:
	// always mounted read-only, as the kubelet does since 1.10, and
	// written with writeAtomic.
	apiData bool
	// tmpfs is set once a medium: Memory emptyDir is mounted as tmpfs.
	tmpfs bool
	// notDir is a hostPath that is not a directory (no subPath, no WASM
	// preopen).
	notDir bool
	// readOnly is a persistentVolumeClaim volume's readOnly: every mount
	// of it is read-only.
	readOnly bool
	src      *corev1.Volume
	// written is the payload last written (API-data volumes), so that an
	// unchanged one costs no disk reads.
	written map[string]fileProjection
}

// volumesDir is <DataDir>/volumes, volumeDir that of one pod.
func (a *Agent) volumesDir() string { return filepath.Join(a.cfg.DataDir, "volumes") }

func (a *Agent) podVolumeDir(uid types.UID) string {
	return filepath.Join(a.volumesDir(), string(uid))
}

// setupVolumes prepares every volume of the pod once (later calls return
// at once): emptyDir directories (a tmpfs for medium: Memory when the
// agent runs as root), configMap, secret, downwardAPI and projected
// volumes (their configMap, secret, downwardAPI and serviceAccountToken
// sources) written atomically, hostPath checked against its type. What is
// already on disk from a previous agent (the same pod's) is kept, so an
// adopted container keeps its data. An error names the volume, records a
// FailedMount Event, and the container waits (CreateContainerConfigError)
// until a later sync succeeds.
func (w *podWorker) setupVolumes(ctx context.Context) error {
	if w.vols != nil && w.vols.ready {
		return nil
	}
	if w.vols == nil || w.vols.tornDown {
		w.vols = &podVolumes{vols: map[string]*volume{}, warned: map[string]bool{}}
	}
	for i := range w.pod.Spec.Volumes {
		v := &w.pod.Spec.Volumes[i]
		if _, done := w.vols.vols[v.Name]; done {
			continue
		}
		vol, err := w.setupVolume(ctx, v)
		if err != nil {
			err = fmt.Errorf("MountVolume.SetUp failed for volume %q: %w", v.Name, err)
			w.a.recorder.Event(w.pod, "", corev1.EventTypeWarning, "FailedMount", truncateMessage(err.Error()))
			return err
		}
		w.vols.vols[v.Name] = vol
	}
	w.vols.ready = true
	w.vols.nextRefresh = time.Now().Add(w.a.cfg.VolumeSyncPeriod)
	return nil
}

// setupVolume prepares one volume.
func (w *podWorker) setupVolume(ctx context.Context, v *corev1.Volume) (*volume, error) {
	dir := func(kind string) string { return filepath.Join(w.a.podVolumeDir(w.uid), kind, v.Name) }
	src := &v.VolumeSource
	switch {
	case src.EmptyDir != nil:
		vol := &volume{name: v.Name, kind: volEmptyDir, path: dir(volEmptyDir), src: v}
		return vol, w.setupEmptyDir(vol)
	case src.HostPath != nil:
		vol := &volume{name: v.Name, kind: volHostPath, path: src.HostPath.Path, src: v}
		notDir, err := checkHostPath(src.HostPath)
		vol.notDir = notDir
		return vol, err
	case src.ConfigMap != nil:
		return w.setupAPIData(ctx, v, dir(volConfigMap), volConfigMap)
	case src.Secret != nil:
		return w.setupAPIData(ctx, v, dir(volSecret), volSecret)
	case src.DownwardAPI != nil:
		return w.setupAPIData(ctx, v, dir(volDownward), volDownward)
	case src.Projected != nil:
		return w.setupAPIData(ctx, v, dir(volProjected), volProjected)
	case src.PersistentVolumeClaim != nil:
		return w.setupClaim(ctx, v)
	}
	return nil, fmt.Errorf("volume type %s is not supported by orca (supported: emptyDir, hostPath, configMap, secret, downwardAPI, projected, persistentVolumeClaim)", volumeType(src))
}

// volumeType is the JSON name of the volume source's type ("nfs").
func volumeType(src *corev1.VolumeSource) string {
	rv := reflect.ValueOf(src).Elem()
	for i := 0; i < rv.NumField(); i++ {
		if f := rv.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return "(none)"
}

// setupEmptyDir makes the directory (mode 0777, as the kubelet's) and, for
// medium: Memory with the agent running as root, mounts a tmpfs on it with
// size= the sizeLimit (unset: the kernel's default, half the RAM). Without
// root a memory emptyDir is a disk directory (logged once).
func (w *podWorker) setupEmptyDir(vol *volume) error {
	ed := vol.src.EmptyDir
	switch ed.Medium {
	case corev1.StorageMediumDefault, corev1.StorageMediumMemory:
	default:
		return fmt.Errorf("emptyDir medium %q is not supported (supported: \"\", Memory)", ed.Medium)
	}
	if err := os.MkdirAll(vol.path, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(vol.path, 0o777); err != nil {
		return err
	}
	if ed.Medium == corev1.StorageMediumMemory && !w.a.cfg.NoMounts {
		if os.Geteuid() != 0 {
			w.a.log.Warn("emptyDir medium Memory needs root for a tmpfs; using a directory on disk", "pod", w.key(), "volume", vol.name)
		} else {
			if err := mountTmpfs(vol.path, 0o777, memoryVolumeBytes(w.pod, ed.SizeLimit, memTotal())); err != nil {
				return err
			}
			vol.tmpfs = true
		}
	}
	if g := w.fsGroup(); g >= 0 {
		// As the kubelet's SetVolumeOwnership: group-owned, setgid.
		if err := os.Chown(vol.path, -1, int(g)); err != nil {
			return err
		}
		if err := os.Chmod(vol.path, 0o777|os.ModeSetgid); err != nil {
			return err
		}
	}
	return nil
}

// fsGroup is the pod's fsGroup when the agent can apply it (root), else -1.
func (w *podWorker) fsGroup() int64 {
	if sc := w.pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil && os.Geteuid() == 0 {
		return *sc.FSGroup
	}
	return -1
}

// checkHostPath checks the node's path against the volume's type, as the
// kubelet's hostPath checkType: DirectoryOrCreate makes a missing
// directory (0755), FileOrCreate a missing empty file (0644; its parent
// must exist); Directory, File, Socket, CharDevice and BlockDevice must
// exist and be of that type; no type checks nothing. notDir reports a path
// that exists and is not a directory.
func checkHostPath(hp *corev1.HostPathVolumeSource) (notDir bool, err error) {
	p := hp.Path
	if !filepath.IsAbs(p) {
		return false, fmt.Errorf("hostPath %q must be an absolute path", p)
	}
	typ := corev1.HostPathUnset
	if hp.Type != nil {
		typ = *hp.Type
	}
	switch typ {
	case corev1.HostPathDirectoryOrCreate:
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return false, fmt.Errorf("hostPath type check failed: create directory %s: %w", p, err)
			}
		}
	case corev1.HostPathFileOrCreate:
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil && !errors.Is(err, os.ErrExist) {
				return false, fmt.Errorf("hostPath type check failed: create file %s: %w", p, err)
			}
			if f != nil {
				f.Close()
			}
		}
	}
	fi, err := os.Stat(p)
	if err != nil {
		if typ == corev1.HostPathUnset {
			return false, nil // no check: the runtime reports a missing path
		}
		return false, fmt.Errorf("hostPath type check failed: %s does not exist", p)
	}
	m := fi.Mode()
	want := map[corev1.HostPathType]struct {
		ok   bool
		what string
	}{
		corev1.HostPathDirectoryOrCreate: {m.IsDir(), "a directory"},
		corev1.HostPathDirectory:         {m.IsDir(), "a directory"},
		corev1.HostPathFileOrCreate:      {m.IsRegular(), "a file"},
		corev1.HostPathFile:              {m.IsRegular(), "a file"},
		corev1.HostPathSocket:            {m&os.ModeSocket != 0, "a socket file"},
		corev1.HostPathCharDev:           {m&os.ModeCharDevice != 0, "a character device"},
		corev1.HostPathBlockDev:          {m&os.ModeDevice != 0 && m&os.ModeCharDevice == 0, "a block device"},
	}
	if typ != corev1.HostPathUnset {
		c, known := want[typ]
		if !known {
			return false, fmt.Errorf("hostPath type %q is not supported", typ)
		}
		if !c.ok {
			return false, fmt.Errorf("hostPath type check failed: %s is not %s", p, c.what)
		}
	}
	return !m.IsDir(), nil
}

// setupAPIData writes a configMap, secret, downwardAPI or projected
// volume. Secret and projected volumes are a tmpfs when the agent runs as
// root, as the kubelet's, so that secrets are not written to disk.
func (w *podWorker) setupAPIData(ctx context.Context, v *corev1.Volume, path, kind string) (*volume, error) {
	vol := &volume{name: v.Name, kind: kind, path: path, apiData: true, src: v}
	payload, err := w.apiDataPayload(ctx, vol)
	if err != nil {
		return nil, err
	}
	if (kind == volSecret || kind == volProjected) && w.a.mounts() {
		if err := os.MkdirAll(path, 0o755); err != nil {
			return nil, err
		}
		if err := mountTmpfs(path, 0o755, 0); err != nil {
			w.a.log.Warn("secret volume on disk: no tmpfs", "pod", w.key(), "volume", v.Name, "err", err)
		} else {
			vol.tmpfs = true
		}
	}
	if _, err := writeAtomic(path, payload, w.fsGroup()); err != nil {
		return nil, err
	}
	vol.written = payload
	return vol, nil
}

// refreshVolumes updates API-data volumes in place, the kubelet's
// periodic remount: downwardAPI files (labels, annotations) on every sync
// of the pod, which an update of the pod triggers; configMap, secret and
// projected volumes by reading their objects from the store every
// Config.VolumeSyncPeriod (polling, not a watch: an agent does not watch
// every ConfigMap and Secret of the cluster), so a change shows within
// one period. A failed read keeps the files as they are (logged), as the
// kubelet does. It also checks emptyDir sizeLimits (see
// emptyDirOverLimit) and reports a volume over its limit.
func (w *podWorker) refreshVolumes(ctx context.Context) (over *volume, usage int64) {
	if w.vols == nil || !w.vols.ready {
		return nil, 0
	}
	due := !time.Now().Before(w.vols.nextRefresh)
	if due {
		w.vols.nextRefresh = time.Now().Add(w.a.cfg.VolumeSyncPeriod)
	}
	w.after(w.vols.nextRefresh)
	names := make([]string, 0, len(w.vols.vols))
	for n := range w.vols.vols {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		vol := w.vols.vols[n]
		switch {
		case vol.apiData && (due || vol.kind == volDownward):
			payload, err := w.apiDataPayload(ctx, vol)
			if err == nil && !samePayload(payload, vol.written) {
				var changed bool
				changed, err = writeAtomic(vol.path, payload, w.fsGroup())
				if err == nil {
					vol.written = payload
				}
				if changed {
					w.a.log.Info("volume updated", "pod", w.key(), "volume", vol.name, "kind", vol.kind)
				}
			}
			if err != nil && ctx.Err() == nil {
				w.a.log.Warn("volume not updated", "pod", w.key(), "volume", vol.name, "err", logText(err.Error()))
			}
		case vol.kind == volEmptyDir && due && over == nil:
			if u, ok := emptyDirOverLimit(vol); ok {
				over, usage = vol, u
			}
		}
	}
	return over, usage
}

// emptyDirOverLimit reports whether a disk emptyDir uses more than its
// sizeLimit (tmpfs ones are bounded by their size= option), counting
// allocated blocks as du does, and the usage in bytes.
func emptyDirOverLimit(vol *volume) (int64, bool) {
	lim := vol.src.EmptyDir.SizeLimit
	if lim == nil || vol.tmpfs {
		return 0, false
	}
	u := diskUsage(vol.path)
	return u, u > lim.Value()
}

// evictForEmptyDir fails the pod whose emptyDir vol exceeds its
// sizeLimit, as the kubelet's eviction manager (localStorageEviction):
// phase Failed, reason Evicted, the kubelet's message, an Evicted Event,
// and its containers killed at once; none is restarted.
func (w *podWorker) evictForEmptyDir(ctx context.Context, vol *volume, usage int64) {
	msg := fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", vol.name, vol.src.EmptyDir.SizeLimit.String())
	w.terminal, w.reason, w.message = corev1.PodFailed, "Evicted", msg
	w.a.log.Info("evicting pod: emptyDir over its sizeLimit", "pod", w.key(), "volume", vol.name, "usage", usage)
	w.a.recorder.Event(w.pod, "", corev1.EventTypeWarning, "Evicted", msg)
	if err := w.writeStatus(ctx); err != nil && ctx.Err() == nil {
		w.a.log.Debug("write Evicted status before the kill failed", "pod", w.key(), "err", err)
	}
	w.killAll(ctx, 0)
}

// syncVolumes is the worker's per-sync volume step: tear the volumes of
// an ended pod down, set up the volumes
// of containers adopted from a previous agent (so that their volumes are
// updated again; a container started by this agent sets them up first),
// refresh, and evict the pod when an emptyDir exceeds its limit.
func (w *podWorker) syncVolumes(ctx context.Context) {
	running := slices.ContainsFunc(w.all(), func(c *container) bool { return c.running })
	if w.terminal != "" && !running && (w.vols == nil || !w.vols.tornDown) {
		// As the kubelet, the volumes of a pod that ended are torn down
		// (its memory emptyDirs give their memory back); its logs stay.
		w.removeVolumes()
		w.vols = &podVolumes{tornDown: true}
	}
	if w.terminal != "" || w.pod.DeletionTimestamp != nil {
		return
	}
	if (w.vols == nil || !w.vols.ready) && len(w.pod.Spec.Volumes) > 0 && running {
		if err := w.setupVolumes(ctx); err != nil {
			w.a.log.Warn("set up volumes of adopted containers", "pod", w.key(), "err", logText(err.Error()))
		}
	}
	if vol, usage := w.refreshVolumes(ctx); vol != nil {
		w.evictForEmptyDir(ctx, vol, usage)
	}
}

// mounts reports whether the agent mounts volumes: tmpfs and subPath
// binds need root, and Config.NoMounts turns them off.
func (a *Agent) mounts() bool { return !a.cfg.NoMounts && os.Geteuid() == 0 }

// removeVolumes unmounts (tmpfs) and removes the pod's volume directory;
// hostPath volumes live elsewhere and are left alone.
func (w *podWorker) removeVolumes() {
	w.vols = nil
	w.a.tokens.forgetPod(w.uid)
	if w.uid == "" {
		return
	}
	if err := w.a.removeVolumeDir(w.a.podVolumeDir(w.uid)); err != nil {
		w.a.log.Warn("remove pod volumes", "pod", w.key(), "err", err)
	}
}

// removeVolumeDir unmounts whatever is mounted under dir, then removes it.
func (a *Agent) removeVolumeDir(dir string) error {
	if err := unmountUnder(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// removeOrphanVolumes removes the volume directories of pods no longer on
// the node (deleted while the agent was down).
func (a *Agent) removeOrphanVolumes() {
	live := map[string]bool{}
	for _, o := range a.nodePods.List("", nil) {
		live[string(o.GetUID())] = true
	}
	ents, _ := os.ReadDir(a.volumesDir())
	for _, e := range ents {
		if e.IsDir() && !live[e.Name()] {
			if err := a.removeVolumeDir(filepath.Join(a.volumesDir(), e.Name())); err != nil {
				a.log.Warn("remove volumes of a pod no longer on this node", "dir", e.Name(), "err", err)
			}
		}
	}
}

// containerMounts resolves c's volumeMounts to runtime mounts: the
// volume's path on the node, subPath (or subPathExpr expanded with env,
// the container's environment) applied and checked by resolveSubPath,
// then, when the agent runs as root on Linux, bind-mounted by
// bindSubPath at <pod volumes>/volume-subpaths/<volume>/<container>/<index
// of the mount> (as the kubelet's), which is what the runtime mounts; the
// pod's volume removal unmounts them;
// read-only when the mount says so and always for API-data volumes.
func (w *podWorker) containerMounts(ctx context.Context, c *corev1.Container, env map[string]string) ([]runtimes.Mount, error) {
	if len(c.VolumeMounts) == 0 {
		return nil, nil
	}
	if err := w.setupVolumes(ctx); err != nil {
		return nil, err
	}
	var out []runtimes.Mount
	for i, vm := range c.VolumeMounts {
		vol, ok := w.vols.vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("volumeMount %q of container %s: no volume of that name in the pod", vm.Name, c.Name)
		}
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			var ok bool
			sub, ok = expand(vm.SubPathExpr, env, maxExpandedValue)
			if !ok {
				return nil, fmt.Errorf("volumeMount %q of container %s: subPathExpr too long", vm.Name, c.Name)
			}
		}
		host := vol.path
		if sub != "" {
			if vol.notDir {
				return nil, fmt.Errorf("volumeMount %q of container %s: subPath %q in a volume that is not a directory", vm.Name, c.Name, sub)
			}
			base, resolved, err := resolveSubPath(vol.path, sub, !vol.apiData)
			if err != nil {
				return nil, fmt.Errorf("volumeMount %q of container %s: %w", vm.Name, c.Name, err)
			}
			host = resolved
			if w.a.mounts() {
				// What was checked is bound where only the agent writes,
				// so that the container cannot swap it before runc mounts it.
				rel, _ := filepath.Rel(base, resolved)
				target := filepath.Join(w.a.podVolumeDir(w.uid), volSubPaths, vm.Name, c.Name, strconv.Itoa(i))
				if err := bindSubPath(base, rel, target); err != nil && !errors.Is(err, errNoBind) {
					return nil, fmt.Errorf("volumeMount %q of container %s: %w", vm.Name, c.Name, err)
				} else if err == nil {
					host = target
				}
			}
		}
		out = append(out, runtimes.Mount{HostPath: host, ContainerPath: vm.MountPath, ReadOnly: vm.ReadOnly || vol.apiData || vol.readOnly})
	}
	return out, nil
}

// apiDataPayload computes the files of an API-data volume.
func (w *podWorker) apiDataPayload(ctx context.Context, vol *volume) (map[string]fileProjection, error) {
	src := &vol.src.VolumeSource
	out := map[string]fileProjection{}
	switch {
	case src.ConfigMap != nil:
		return out, w.configMapFiles(ctx, out, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, mode(src.ConfigMap.DefaultMode, defaultVolumeMode))
	case src.Secret != nil:
		return out, w.secretFiles(ctx, out, src.Secret.SecretName, src.Secret.Items, src.Secret.Optional, mode(src.Secret.DefaultMode, defaultVolumeMode))
	case src.DownwardAPI != nil:
		return out, w.downwardFiles(out, src.DownwardAPI.Items, mode(src.DownwardAPI.DefaultMode, defaultVolumeMode))
	case src.Projected != nil:
		dm := mode(src.Projected.DefaultMode, defaultVolumeMode)
		for _, s := range src.Projected.Sources {
			var err error
			switch {
			case s.ConfigMap != nil:
				err = w.configMapFiles(ctx, out, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional, dm)
			case s.Secret != nil:
				err = w.secretFiles(ctx, out, s.Secret.Name, s.Secret.Items, s.Secret.Optional, dm)
			case s.DownwardAPI != nil:
				err = w.downwardFiles(out, s.DownwardAPI.Items, dm)
			case s.ServiceAccountToken != nil:
				err = w.serviceAccountTokenFile(ctx, out, s.ServiceAccountToken, dm)
			default:
				w.warnOnce(vol, "projected volume %q: source %s is not supported by orca and is left out", vol.name, projectionType(&s))
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// serviceAccountTokenFile adds the token of a serviceAccountToken
// projection to out: a token of the pod's ServiceAccount bound to the pod
// (so it stops working when the pod is deleted), with the projection's
// audience and expirationSeconds, requested through the agent's API and
// renewed at 80% of its life as the kubelet's (tokenManager; the volume
// refresh writes the new one).
func (w *podWorker) serviceAccountTokenFile(ctx context.Context, out map[string]fileProjection, src *corev1.ServiceAccountTokenProjection, dm os.FileMode) error {
	sa := w.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tok, err := w.a.tokens.token(ctx, w.ns, sa, projectedTokenRequest(w.pod, src))
	if err != nil {
		return err
	}
	out[src.Path] = fileProjection{Data: []byte(tok), Mode: dm}
	return nil
}

// warnOnce records a Warning Event (and a log line) once per worker.
func (w *podWorker) warnOnce(vol *volume, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if w.vols.warned[msg] {
		return
	}
	w.vols.warned[msg] = true
	w.a.log.Warn(msg, "pod", w.key())
	w.a.recorder.Event(w.pod, "", corev1.EventTypeWarning, "UnsupportedVolumeSource", truncateMessage(msg))
}

func projectionType(s *corev1.VolumeProjection) string {
	b, _ := json.Marshal(s)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	for k := range m {
		return k
	}
	return "(none)"
}

func mode(m *int32, def os.FileMode) os.FileMode {
	if m == nil {
		return def
	}
	return os.FileMode(*m) & 0o777
}

// configMapFiles adds the keys of ConfigMap name (or only items) to out,
// as the kubelet's configMap volume: a missing ConfigMap or key is an
// error unless optional.
func (w *podWorker) configMapFiles(ctx context.Context, out map[string]fileProjection, name string, items []corev1.KeyToPath, opt *bool, dm os.FileMode) error {
	cm, err := w.configMap(ctx, name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			if optional(opt) {
				return nil
			}
			return fmt.Errorf("configmap %q not found", name)
		}
		return err
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return project(out, data, items, opt, dm, "configmap", name)
}

// secretFiles is configMapFiles for Secret name.
func (w *podWorker) secretFiles(ctx context.Context, out map[string]fileProjection, name string, items []corev1.KeyToPath, opt *bool, dm os.FileMode) error {
	sec, err := w.secret(ctx, name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			if optional(opt) {
				return nil
			}
			return fmt.Errorf("secret %q not found", name)
		}
		return err
	}
	return project(out, sec.Data, items, opt, dm, "secret", name)
}

// project adds data to out: every key as a file of that name, or only
// items (key -> path, with their own mode).
func project(out map[string]fileProjection, data map[string][]byte, items []corev1.KeyToPath, opt *bool, dm os.FileMode, kind, name string) error {
	if len(items) == 0 {
		for k, v := range data {
			out[k] = fileProjection{Data: v, Mode: dm}
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional(opt) {
				continue
			}
			return fmt.Errorf("%s %q references non-existent key %q", kind, name, it.Key)
		}
		out[it.Path] = fileProjection{Data: v, Mode: mode(it.Mode, dm)}
	}
	return nil
}

// downwardFiles adds the downward API items to out: fieldRef
// (metadata.name, namespace, uid, labels, annotations, labels['k'],
// annotations['k'], spec.nodeName, spec.serviceAccountName, status.*IP)
// and resourceFieldRef of a named container; labels and annotations are
// "key=\"value\"" lines sorted by key, as the kubelet's FormatMap.
func (w *podWorker) downwardFiles(out map[string]fileProjection, items []corev1.DownwardAPIVolumeFile, dm os.FileMode) error {
	for _, it := range items {
		var v string
		switch {
		case it.FieldRef != nil:
			switch it.FieldRef.FieldPath {
			case "metadata.labels":
				v = formatMap(w.pod.Labels)
			case "metadata.annotations":
				v = formatMap(w.pod.Annotations)
			default:
				var err error
				if v, err = w.fieldRef(it.FieldRef.FieldPath); err != nil {
					return fmt.Errorf("downwardAPI item %q: %w", it.Path, err)
				}
			}
		case it.ResourceFieldRef != nil:
			c := w.specContainer(it.ResourceFieldRef.ContainerName)
			if c == nil {
				return fmt.Errorf("downwardAPI item %q: no container %q in the pod", it.Path, it.ResourceFieldRef.ContainerName)
			}
			var err error
			if v, _, err = resourceFieldRef(c, it.ResourceFieldRef); err != nil {
				return fmt.Errorf("downwardAPI item %q: %w", it.Path, err)
			}
		default:
			return fmt.Errorf("downwardAPI item %q: needs fieldRef or resourceFieldRef", it.Path)
		}
		out[it.Path] = fileProjection{Data: []byte(v), Mode: mode(it.Mode, dm)}
	}
	return nil
}

func (w *podWorker) specContainer(name string) *corev1.Container {
	for _, cs := range [][]corev1.Container{w.pod.Spec.Containers, w.pod.Spec.InitContainers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	return nil
}

// formatMap is the kubelet's fieldpath.FormatMap.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	return b.String()
}

// memoryVolumeBytes is the size of a medium: Memory emptyDir's tmpfs, as
// the kubelet's calculateEmptyDirMemorySize: the node's memory (mem,
// bytes), less when the pod's memory limit is (every container has one:
// the sum of the app containers', or the largest init container's if
// more), less again when the volume's sizeLimit is (a value of 0 or
// below does not count). Pages of a tmpfs are not reclaimed under
// memory pressure, so a sizeLimit above what the pod may use would let
// it take the node's memory. 0 leaves the kernel's default (half the
// memory).
func memoryVolumeBytes(pod *corev1.Pod, sizeLimit *resource.Quantity, mem int64) int64 {
	size := mem
	lower := func(v int64) {
		if v > 0 && (size <= 0 || v < size) {
			size = v
		}
	}
	var apps, inits int64
	limited := len(pod.Spec.Containers) > 0
	for _, c := range pod.Spec.Containers {
		l, ok := c.Resources.Limits[corev1.ResourceMemory]
		limited = limited && ok && l.Value() > 0
		apps += l.Value()
	}
	for _, c := range pod.Spec.InitContainers {
		l, ok := c.Resources.Limits[corev1.ResourceMemory]
		limited = limited && ok && l.Value() > 0
		inits = max(inits, l.Value())
	}
	if limited {
		lower(max(apps, inits))
	}
	lower(quantityBytes(sizeLimit))
	return size
}

// quantityBytes is q in bytes, 0 for nil.
func quantityBytes(q *resource.Quantity) int64 {
	if q == nil {
		return 0
	}
	return q.Value()
}
