package containerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/oci"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/logfile"
)

const sigkill = syscall.SIGKILL

// cfsPeriod is the CFS period of every task, the kubelet's (100 ms).
const cfsPeriod = 100_000 // µs

// minCFSQuota is the smallest quota the kernel accepts (1 ms).
const minCFSQuota = 1_000 // µs

func withNamespace(ctx context.Context, ns string) context.Context {
	return namespaces.WithNamespace(ctx, ns)
}

// Start creates the container (from an image already in the image store,
// see the package doc), opens the log and the port listeners, creates the
// task, waits on it and starts it. It returns once the process runs. On
// any failure nothing is left behind: not the container, its snapshot, the
// task, nor the listeners. Errors wrap runtimes.ErrImage when the image
// cannot be had.
func (r *Runtime) Start(ctx context.Context, spec runtimes.TaskSpec) (runtimes.TaskStatus, error) {
	if spec.ID == "" {
		return runtimes.TaskStatus{}, errors.New("start task: empty ID")
	}
	if !r.claim(spec.ID) {
		return runtimes.TaskStatus{}, fmt.Errorf("start %s: ID already in use", taskName(spec))
	}
	st, err := r.start(withNamespace(ctx, r.cfg.Namespace), spec)
	r.mu.Lock()
	delete(r.starting, spec.ID)
	r.mu.Unlock()
	if err != nil {
		return runtimes.TaskStatus{}, fmt.Errorf("start %s: %w", taskName(spec), err)
	}
	return st, nil
}

// claim reserves id for a Start; false if a task or a Start has it.
func (r *Runtime) claim(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tasks[id]; ok || r.starting[id] {
		return false
	}
	r.starting[id] = true
	return true
}

func (r *Runtime) start(ctx context.Context, spec runtimes.TaskSpec) (_ runtimes.TaskStatus, err error) {
	img, err := r.image(ctx, spec)
	if err != nil {
		return runtimes.TaskStatus{}, err
	}
	imgSpec, err := img.Spec(ctx)
	if err != nil {
		return runtimes.TaskStatus{}, fmt.Errorf("read config of image %s: %v: %w", img.Name(), err, runtimes.ErrImage)
	}
	fwd, err := listenFor(spec)
	if err != nil {
		return runtimes.TaskStatus{}, err
	}
	defer func() {
		if err != nil {
			fwd.close()
		}
	}()
	logf, err := logfile.OpenRotating(spec.LogPath, logfile.RotationFrom(ctx)) // the node's --container-log-max-size/-files
	if err != nil {
		return runtimes.TaskStatus{}, fmt.Errorf("open log: %w", err)
	}
	defer func() {
		if err != nil {
			logf.Close()
		}
	}()

	cid := containerID(spec.ID)
	labels := map[string]string{
		LabelPodNamespace:  spec.PodNamespace,
		LabelPodName:       spec.PodName,
		LabelPodUID:        spec.PodUID,
		LabelContainerName: spec.ContainerName,
		LabelTaskID:        spec.ID,
		LabelImage:         spec.Image,
		LabelLogPath:       spec.LogPath,
	}
	if b := fwd.bindings(); len(b) > 0 {
		j, _ := json.Marshal(b)
		labels[LabelPorts] = string(j)
	}
	if spec.PodIP != "" && !spec.HostNetwork {
		labels[LabelPodIP] = spec.PodIP
	}
	begin := time.Now()
	c, err := r.client.NewContainer(ctx, cid,
		ctrd.WithContainerLabels(labels),
		ctrd.WithImage(img),
		ctrd.WithImageStopSignal(img, "SIGTERM"),
		ctrd.WithSnapshotter(r.cfg.Snapshotter),
		ctrd.WithNewSnapshot(cid, img),
		ctrd.WithRuntime(r.cfg.Runtime, nil),
		ctrd.WithNewSpec(r.specOpts(cid, spec, imgSpec.Config)...),
	)
	if err != nil {
		return runtimes.TaskStatus{}, fmt.Errorf("create container %s: %w", cid, err)
	}
	var tk ctrd.Task
	defer func() {
		if err != nil {
			// Not under ctx, which may be what ended.
			cctx, cancel := context.WithTimeout(withNamespace(context.Background(), r.cfg.Namespace), 10*time.Second)
			defer cancel()
			if tk != nil {
				_ = tk.Kill(cctx, sigkill)
				if ch, werr := tk.Wait(cctx); werr == nil {
					<-ch
				}
			}
			if rerr := r.remove(cctx, c, tk); rerr != nil {
				r.log.Warn("clean up after a failed start", "task", spec.ID, "err", rerr)
			}
		}
	}()
	stopSignal, err := ctrd.GetStopSignal(ctx, c, syscall.SIGTERM)
	if err != nil {
		return runtimes.TaskStatus{}, fmt.Errorf("stop signal: %w", err)
	}
	created := time.Now()
	hub := newAttachHub(spec)
	copts := []cio.Opt{cio.WithStreams(hub.stdinReader(), hub.writer(logfile.Stdout, logf.Writer(logfile.Stdout)), hub.writer(logfile.Stderr, logf.Writer(logfile.Stderr))),
		cio.WithFIFODir(filepath.Join(r.cfg.DataDir, "fifo"))}
	if spec.TTY {
		copts = append(copts, cio.WithTerminal)
	}
	tk, err = c.NewTask(ctx, cio.NewCreator(copts...))
	if err != nil {
		return runtimes.TaskStatus{}, fmt.Errorf("create task of container %s: %w", cid, err)
	}
	t := newTask(spec, c, tk, logf, fwd, stopSignal, r.cgroupsPath(cid))
	t.hub = hub
	t.status.ImageID = imageID(img.Metadata())
	// Wait before Start: an exit that comes at once is not missed.
	exitCh, err := tk.Wait(r.ctx)
	if err != nil {
		return runtimes.TaskStatus{}, fmt.Errorf("wait on task of container %s: %w", cid, err)
	}
	started := time.Now()
	if err := tk.Start(ctx); err != nil {
		return runtimes.TaskStatus{}, fmt.Errorf("start task of container %s: %w", cid, err)
	}
	t.setRunning(started)
	// For Recover: best effort, the container's creation time stands in.
	if _, err := c.SetLabels(ctx, map[string]string{LabelStartedAt: started.UTC().Format(time.RFC3339Nano)}); err != nil {
		r.log.Warn("label the start time", "task", spec.ID, "err", err)
	}
	fwd.serve(r.ctx, netnsPath(tk.Pid()), labels[LabelPodIP])
	r.mu.Lock()
	r.tasks[spec.ID] = t
	r.mu.Unlock()
	go r.watch(t, exitCh)
	r.log.Info("task started", "task", spec.ID, "container", cid, "pod", spec.PodNamespace+"/"+spec.PodName,
		"name", spec.ContainerName, "image", img.Name(), "pid", tk.Pid(), "ports", len(spec.Ports),
		// Where the time went: the container (snapshot, spec), the task
		// (shim, runc create), its start (runc start).
		"create_container", created.Sub(begin), "create_task", started.Sub(created), "start_task", time.Since(started))
	return t.snapshot(), nil
}

// specOpts builds the OCI spec on containerd's defaults for Linux (its own
// pid, mount, ipc, uts and network namespaces, default capabilities and
// mounts): the image's config with Kubernetes' Command/Args/Env rules, the
// pod's hostname, the cgroup, the pod's network (withNetwork) and the
// limits.
func (r *Runtime) specOpts(cid string, spec runtimes.TaskSpec, ic ocispec.ImageConfig) []oci.SpecOpts {
	opts := []oci.SpecOpts{
		checkImageUser(spec, ic),
		withImageConfig(ic, spec),
		oci.WithHostname(podHostname(spec)),
		oci.WithCgroup(r.cgroupsPath(cid)),
		r.withNetwork(cid, spec),
	}
	if spec.TTY {
		opts = append(opts, oci.WithTTY)
	}
	if l := spec.MemoryLimitBytes; l > 0 {
		opts = append(opts, oci.WithMemoryLimit(uint64(l)))
		if swapAccounted() {
			opts = append(opts, oci.WithMemorySwap(l)) // memory+swap = memory: no swap
		}
	}
	if m := spec.CPULimitMillis; m > 0 {
		opts = append(opts, oci.WithCPUCFS(cfsQuota(m), cfsPeriod))
	}
	opts = append(append(append(opts, resourceOpts(spec)...), mountOpts(spec)...), securityOpts(spec, ic)...)
	return opts
}

// cgroupsPath is the cgroup of the task in container cid.
func (r *Runtime) cgroupsPath(cid string) string {
	return strings.TrimSuffix(r.cfg.CgroupParent, "/") + "/" + cid
}

// cfsQuota is the kubelet's milliCPUToQuota: millis of a core per period.
func cfsQuota(millis int64) int64 {
	return max(millis*cfsPeriod/1000, minCFSQuota)
}

// argv applies Kubernetes' rules to the image's ENTRYPOINT and CMD:
// Command replaces ENTRYPOINT (and drops CMD), Args replace CMD.
func argv(ic ocispec.ImageConfig, command, args []string) []string {
	var out []string
	switch {
	case len(command) > 0:
		out = append(out, command...)
		out = append(out, args...)
	case len(args) > 0:
		out = append(out, ic.Entrypoint...)
		out = append(out, args...)
	default:
		out = append(out, ic.Entrypoint...)
		out = append(out, ic.Cmd...)
	}
	return out
}

// hostname is the container's hostname for a pod: its name cut to 63
// bytes without a trailing '-' or '.', as the kubelet's
// GeneratePodHostNameAndDomain does (a pod name may be 253 long, a
// hostname 64 at most).
// podHostname is the task's pod hostname: spec.Hostname, else the pod name.
func podHostname(spec runtimes.TaskSpec) string {
	if spec.Hostname != "" {
		return hostname(spec.Hostname)
	}
	return hostname(spec.PodName)
}

func hostname(pod string) string {
	if len(pod) > 63 {
		pod = strings.TrimRight(pod[:63], "-.")
	}
	return pod
}

// defaultPath is the PATH of a process whose image sets none
// (containerd's and Docker's default).
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// env returns the image's environment overlaid with the container's (a
// name in both takes the container's value) and HOSTNAME, the
// container's hostname, unless the container sets it.
func env(ic ocispec.ImageConfig, spec runtimes.TaskSpec) []string {
	base := ic.Env
	if len(base) == 0 {
		base = []string{defaultPath}
	}
	var out []string
	index := map[string]int{}
	set := func(kv string) {
		name, _, _ := strings.Cut(kv, "=")
		if i, ok := index[name]; ok {
			out[i] = kv
			return
		}
		index[name] = len(out)
		out = append(out, kv)
	}
	for _, kv := range base {
		set(kv)
	}
	set("HOSTNAME=" + podHostname(spec))
	for _, kv := range spec.Env {
		set(kv)
	}
	return out
}

// withImageConfig sets the process from the image's config (as
// oci.WithImageConfig, without mounting the root filesystem when the user
// is root or numeric uid:gid: supplementary groups are read from the
// image's /etc/group only for a named user).
func withImageConfig(ic ocispec.ImageConfig, spec runtimes.TaskSpec) oci.SpecOpts {
	return func(ctx context.Context, client oci.Client, c *containers.Container, s *oci.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		args := argv(ic, spec.Command, spec.Args)
		if len(args) == 0 {
			return fmt.Errorf("image has neither ENTRYPOINT nor CMD and the container no command: %w", runtimes.ErrImage)
		}
		s.Process.Args = args
		s.Process.Env = env(ic, spec)
		s.Process.Cwd = ic.WorkingDir
		if s.Process.Cwd == "" {
			s.Process.Cwd = "/"
		}
		user := ic.User
		if spec.Security != nil && spec.Security.RunAsUser != nil {
			user = "" // runAsUser replaces the image's user (securityOpts), as in the CRI
		}
		if user == "" || user == "0" || user == "root" || user == "0:0" {
			s.Process.User.UID, s.Process.User.GID = 0, 0
			return nil
		}
		if u, g, ok := strings.Cut(user, ":"); ok {
			uid, err1 := strconv.ParseUint(u, 10, 32)
			gid, err2 := strconv.ParseUint(g, 10, 32)
			if err1 == nil && err2 == nil {
				return oci.WithUIDGID(uint32(uid), uint32(gid))(ctx, client, c, s)
			}
		}
		if err := oci.WithUser(user)(ctx, client, c, s); err != nil {
			return err
		}
		return oci.WithAdditionalGIDs(strconv.FormatUint(uint64(s.Process.User.UID), 10))(ctx, client, c, s)
	}
}
