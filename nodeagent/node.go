package nodeagent

import (
	"bufio"

	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
)

// resourceQuantity returns n as a quantity; unit "Bi" gives BinarySI (bytes).
func resourceQuantity(n int64, unit string) *resource.Quantity {
	if unit == "Bi" {
		return resource.NewQuantity(n, resource.BinarySI)
	}
	return resource.NewQuantity(n, resource.DecimalSI)
}

// memTotal returns MemTotal of /proc/meminfo in bytes, or 0.
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

// readTrimmed returns the trimmed content of a small system file, or "".
func readTrimmed(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// osImage is PRETTY_NAME of /etc/os-release ("Debian GNU/Linux 12
// (bookworm)"), as the kubelet reports it; "" when unknown.
func osImage() string {
	for _, line := range strings.Split(readTrimmed("/etc/os-release"), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return ""
}

// nodeLabels returns the labels the agent owns on its Node.
func (a *Agent) nodeLabels() map[string]string {
	l := map[string]string{
		corev1.LabelHostname:   a.cfg.NodeName,
		corev1.LabelOSStable:   runtime.GOOS,
		corev1.LabelArchStable: runtime.GOARCH,
	}
	for _, h := range a.handlers() {
		l[nodeapi.RuntimeLabel(h)] = "true"
	}
	for k, v := range a.cfg.Labels {
		l[k] = v
	}
	return l
}

// setNodeStatus fills in everything the agent reports about its Node, with
// the Ready condition's heartbeat at now (the kubelet's
// setNodeStatus/setNodeReadyCondition, pkg/kubelet/nodestatus).
func (a *Agent) setNodeStatus(n *corev1.Node, now metav1.Time) {
	capacity := a.capacity()
	n.Status.Capacity = capacity
	n.Status.Allocatable = capacity.DeepCopy()
	n.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: a.cfg.NodeIP},
		{Type: corev1.NodeHostName, Address: a.cfg.NodeName},
	}
	n.Status.NodeInfo.Architecture = runtime.GOARCH
	n.Status.NodeInfo.OperatingSystem = runtime.GOOS
	n.Status.NodeInfo.KubeletVersion = KubeletVersion
	n.Status.NodeInfo.KubeProxyVersion = ""
	n.Status.NodeInfo.ContainerRuntimeVersion = "orca://" + strings.Join(a.handlers(), ",")
	n.Status.NodeInfo.KernelVersion = readTrimmed("/proc/sys/kernel/osrelease")
	n.Status.NodeInfo.OSImage = osImage()
	n.Status.NodeInfo.MachineID = readTrimmed("/etc/machine-id")
	n.Status.NodeInfo.BootID = readTrimmed("/proc/sys/kernel/random/boot_id")
	n.Status.Phase = ""
	setNodeCondition(n, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "orca agent is posting ready status"}, now)
	setNodeCondition(n, corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "orca agent has sufficient memory available"}, now)
	setNodeCondition(n, corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "orca agent has no disk pressure"}, now)
	setNodeCondition(n, corev1.NodeCondition{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "orca agent has sufficient PID available"}, now)
	setNodeCondition(n, a.runtimeCondition(), now)
}

// setNodeCondition sets c with heartbeat now, keeping lastTransitionTime
// when the status did not change.
func setNodeCondition(n *corev1.Node, c corev1.NodeCondition, now metav1.Time) {
	c.LastHeartbeatTime = now
	for i := range n.Status.Conditions {
		old := &n.Status.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		c.LastTransitionTime = old.LastTransitionTime
		if old.Status != c.Status || c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = now
		}
		*old = c
		return
	}
	c.LastTransitionTime = now
	n.Status.Conditions = append(n.Status.Conditions, c)
}

// registerNode creates the agent's Node or, when it exists (an agent that
// restarts), updates its labels and status, as the kubelet's
// registerWithAPIServer does. It retries until ctx ends.
func (a *Agent) registerNode(ctx context.Context) error {
	for {
		err := a.syncNode(ctx, true)
		if err == nil {
			return nil
		}
		a.log.Warn("register node failed, retrying", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("register node %s: %w", a.cfg.NodeName, err)
		case <-time.After(time.Second):
		}
	}
}

// syncNode writes the Node's labels (when labels is set) and status.
func (a *Agent) syncNode(ctx context.Context, labels bool) error {
	// Update (GuaranteedUpdate retries lost races), or create when
	// missing; a create that loses to another creator updates again.
	return retry.OnError(retry.DefaultRetry, apierrors.IsAlreadyExists, func() error {
		var err error
		if labels {
			// Labels are the Node's main resource, status its status
			// subresource: two writes, as the kubelet's.
			_, err = updateObject(ctx, a.api, store.Nodes, "", a.cfg.NodeName, false, func(obj store.Object) (bool, error) {
				n := obj.(*corev1.Node)
				if n.Labels == nil {
					n.Labels = map[string]string{}
				}
				for k, v := range a.nodeLabels() {
					n.Labels[k] = v
				}
				metav1.SetMetaDataAnnotation(&n.ObjectMeta, nodeapi.AnnLocalStoragePath, a.localStoragePath())
				return true, nil
			})
		}
		if err == nil {
			_, err = updateObject(ctx, a.api, store.Nodes, "", a.cfg.NodeName, true, func(obj store.Object) (bool, error) {
				a.setNodeStatus(obj.(*corev1.Node), metav1.Now())
				return true, nil
			})
		}
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("update node %s status: %w", a.cfg.NodeName, err)
		}
		// A Node's create takes its status too, as Kubernetes'.
		now := metav1.Now()
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName, Labels: a.nodeLabels(),
			Annotations: map[string]string{nodeapi.AnnLocalStoragePath: a.localStoragePath()}}}
		a.setNodeStatus(n, now)
		_, err = a.api.Create(ctx, store.Nodes, n)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", a.cfg.NodeName, err)
		}
		return err
	})
}

// nodeStatusStale reports whether the stored Node needs a status post.
func (a *Agent) nodeStatusStale(ctx context.Context) bool {
	obj, err := a.api.Get(ctx, store.Nodes, "", a.cfg.NodeName)
	if err != nil {
		return true // missing (re-register) or unreadable: try a write
	}
	for _, c := range obj.(*corev1.Node).Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status != corev1.ConditionTrue || time.Since(c.LastHeartbeatTime.Time) >= a.cfg.StatusInterval
		}
	}
	return true
}
