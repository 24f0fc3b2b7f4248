package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/nodeagent/podnet"
	"github.com/orca-edge/orca/runtimes"
)

// Event reasons of the pod network (the first is the kubelet's).
const (
	reasonFailedCreatePodSandbox = "FailedCreatePodSandBox"
	reasonPodNetworkUnavailable  = "PodNetworkUnavailable"
)

// sandboxRetry is how soon a pod whose sandbox could not be set up tries
// again.
const sandboxRetry = 2 * time.Second

// startPodNetwork builds the pod network of Config.PodNetwork once the
// Node is registered: its pod CIDR is Config.PodNetwork.PodCIDR (the
// agent's --pod-cidr), else the Node's spec.podCIDR (waited for up to
// Config.PodCIDRWait), else podnet.DefaultPodCIDR. Without the CNI
// plugins the node runs container pods as before (each container in a
// namespace of its own, its ports forwarded from the node) and WASM pods
// on the node's IP, says so in one log line and a Node event, and fails
// no pod. Other errors (the
// state directory cannot be written) end Run.
func (a *Agent) startPodNetwork(ctx context.Context) error {
	if a.cfg.PodNetwork == nil {
		return nil
	}
	cfg := *a.cfg.PodNetwork
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(a.cfg.DataDir, "podnet")
	}
	if cfg.Logger == nil {
		cfg.Logger = a.log
	}
	if cfg.PodCIDR == "" {
		cfg.PodCIDR = a.nodePodCIDR(ctx)
		if cfg.PodCIDR == "" {
			a.log.Warn("the Node has no spec.podCIDR (the control plane's node IPAM is off, or slow); the pod network uses the default", "podCIDR", podnet.DefaultPodCIDR, "waited", a.cfg.PodCIDRWait)
		}
	}
	n, err := podnet.New(cfg)
	if errors.Is(err, podnet.ErrPluginsMissing) {
		msg := fmt.Sprintf("no pod network: %v; container pods run in a network namespace per container, reached through host ports only", err)
		a.log.Warn(msg)
		if obj, gerr := a.api.Get(ctx, store.Nodes, "", a.cfg.NodeName); gerr == nil {
			a.recorder.Event(obj, "", corev1.EventTypeWarning, reasonPodNetworkUnavailable, truncateMessage(msg))
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("nodeagent: node %s: %w", a.cfg.NodeName, err)
	}
	a.podnet = n
	a.log.Info("pod network ready", "bridge", n.Config().Bridge, "podCIDR", n.PodCIDR().String())
	return nil
}

// nodePodCIDR returns the Node's spec.podCIDR, waiting up to
// Config.PodCIDRWait for the control plane to set it; "" when it has
// none by then.
func (a *Agent) nodePodCIDR(ctx context.Context) string {
	deadline := time.Now().Add(a.cfg.PodCIDRWait)
	for {
		if obj, err := a.api.Get(ctx, store.Nodes, "", a.cfg.NodeName); err == nil {
			if c := obj.(*corev1.Node).Spec.PodCIDR; c != "" {
				return c
			}
		}
		if !time.Now().Before(deadline) {
			return ""
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// PodNetwork returns the agent's pod network, or nil when it has none
// (Config.PodNetwork nil, or the CNI plugins are missing).
func (a *Agent) PodNetwork() *podnet.Network { return a.podnet }

// gcSandboxes tears down the sandboxes of pods no longer on this node
// (deleted while the agent was down), as the kubelet's sandbox GC. The
// node's pods are listed after the sandboxes: one set up meanwhile counts
// as live.
func (a *Agent) gcSandboxes(ctx context.Context) {
	if a.podnet == nil {
		return
	}
	var live map[string]bool
	removed, err := a.podnet.GC(ctx, func(uid string) bool {
		if live == nil {
			live = map[string]bool{}
			for _, o := range a.nodePods.List("", nil) {
				live[string(o.GetUID())] = true
			}
		}
		return live[uid]
	})
	if len(removed) > 0 {
		a.log.Info("removed the sandboxes of pods no longer on this node", "pods", removed)
	}
	if err != nil {
		a.log.Warn("sandbox garbage collection", "err", err)
	}
}

// usesPodNetwork reports whether the worker's pod runs in a sandbox of
// the pod network: a container pod (RuntimeClass handler runc) outside
// the node's network, on a node with a pod network.
func (w *podWorker) usesPodNetwork() bool {
	return w.a.podnet != nil && w.rt != nil && w.rt.Handler() == nodeapi.HandlerContainerd && !w.pod.Spec.HostNetwork
}

// usesPodAddress reports whether the worker's pod gets an address of the
// pod network without a sandbox (podnet.SetupAddress): a WASM pod (its
// modules run in the agent, in the node's network namespace) outside the
// node's network, on a node with a pod network. Its containerPorts
// listen on that address.
func (w *podWorker) usesPodAddress() bool {
	return w.a.podnet != nil && w.rt != nil && w.rt.Handler() == nodeapi.HandlerWasm && !w.pod.Spec.HostNetwork
}

// ensureSandbox sets up the pod's sandbox before its first container (or
// takes back the one a previous agent made, for adopted containers). It
// reports whether containers may start; when the set-up failed, the
// containers wait in ContainerCreating, an Event says why and the worker
// tries again after sandboxRetry.
//
// A WASM pod's "sandbox" is its address alone (usesPodAddress): a
// Sandbox with the IP and no NetNSPath.
func (w *podWorker) ensureSandbox(ctx context.Context) bool {
	if w.sandbox != nil {
		return true
	}
	var sb podnet.Sandbox
	var err error
	pod := podnet.Pod{Namespace: w.ns, Name: w.name, UID: string(w.uid)}
	switch {
	case w.usesPodNetwork():
		sb, err = w.a.podnet.Setup(ctx, pod)
	case w.usesPodAddress():
		sb.IP, err = w.a.podnet.SetupAddress(ctx, pod)
	default:
		return true
	}
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		w.a.log.Warn("pod sandbox set-up failed", "pod", w.key(), "err", logText(err.Error()))
		if w.pod != nil {
			w.a.recorder.Event(w.pod, "", corev1.EventTypeWarning, reasonFailedCreatePodSandbox, truncateMessage("Failed to create pod sandbox: "+err.Error()))
		}
		w.after(time.Now().Add(sandboxRetry))
		return false
	}
	w.sandbox, w.podIP = &sb, sb.IP
	if sb.NetNSPath == "" {
		w.a.log.Info("pod address ready", "pod", w.key(), "ip", sb.IP)
	} else {
		w.a.log.Info("pod sandbox ready", "pod", w.key(), "ip", sb.IP, "netns", sb.NetNSPath)
	}
	return true
}

// teardownSandbox removes the pod's sandbox (its containers have
// stopped). A failure is logged; the sandbox GC of the next agent start
// tries again.
func (w *podWorker) teardownSandbox(ctx context.Context) {
	if w.a.podnet == nil || w.uid == "" {
		return
	}
	if err := w.a.podnet.Teardown(context.WithoutCancel(ctx), string(w.uid)); err != nil {
		w.a.log.Warn("pod sandbox teardown failed", "pod", w.key(), "err", err)
	}
	w.sandbox = nil
}

// networkSpec sets the network fields of a task of the pod: a container
// pod's sandbox (NetNSPath and PodIP), a WASM pod's address (PodIP
// alone: the runtime listens on PodIP:containerPort).
func (w *podWorker) networkSpec(spec *runtimes.TaskSpec) {
	spec.HostNetwork = w.pod.Spec.HostNetwork
	if w.sandbox != nil && !spec.HostNetwork {
		spec.NetNSPath, spec.PodIP = w.sandbox.NetNSPath, w.sandbox.IP
	}
}

// statusPodIP is the pod's status.podIP: its sandbox's address or, for a
// WASM pod, its own address ("" until it has one, as the kubelet), else
// (a hostNetwork pod, a node without pod network) the node's.
func (w *podWorker) statusPodIP() string {
	if w.podIP != "" && !w.pod.Spec.HostNetwork {
		return w.podIP
	}
	if w.usesPodNetwork() || w.usesPodAddress() {
		return ""
	}
	return w.a.cfg.NodeIP
}

// ownIP reports whether the pod has an IP of its own (a sandbox, or a
// WASM pod's address) that its containerPorts are served on: then a
// port is bound on the node only when it asks for a hostPort.
func (w *podWorker) ownIP() bool {
	return w.sandbox != nil && !w.pod.Spec.HostNetwork
}

// sandboxIP is the IP of the pod's sandbox while it has one, else "".
func (w *podWorker) sandboxIP() string {
	if w.sandbox == nil {
		return ""
	}
	return w.sandbox.IP
}
