package nodeagent

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
)

func getNode(e *env, name string) (*corev1.Node, error) {
	o, err := e.s.Get(context.Background(), store.Nodes, "", name)
	if err != nil {
		return nil, err
	}
	return o.(*corev1.Node), nil
}

func nodeReady(n *corev1.Node) corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{}
}

func TestNodeRegistration(t *testing.T) {
	e := newEnv(t)
	e.agent("edge-1", func(c *Config) {
		c.Labels = map[string]string{"zone": "shop-7"}
		c.NodeIP = "127.0.0.1"
		c.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}
		// Only a Ready condition that is not True may trigger a status
		// post below, not the periodic report.
		c.StatusInterval = time.Hour
	}, testruntime.New("wasm"), testruntime.New("runc"))

	n, err := getNode(e, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		corev1.LabelHostname: "edge-1", corev1.LabelOSStable: "linux", "zone": "shop-7",
		nodeapi.RuntimeLabel("wasm"): "true", nodeapi.RuntimeLabel("runc"): "true",
	} {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	if q := n.Status.Capacity[corev1.ResourceCPU]; q.String() != "3" {
		t.Errorf("cpu capacity %s, want 3 (from Config)", q.String())
	}
	if q := n.Status.Capacity[corev1.ResourcePods]; q.Value() != 110 {
		t.Errorf("pods capacity %s, want 110", q.String())
	}
	if q := n.Status.Allocatable[corev1.ResourceMemory]; q.Value() <= 0 {
		t.Errorf("memory allocatable %s, want > 0 (from /proc/meminfo)", q.String())
	}
	if len(n.Status.Addresses) != 2 || n.Status.Addresses[0].Type != corev1.NodeInternalIP || n.Status.Addresses[0].Address != "127.0.0.1" {
		t.Errorf("addresses %+v", n.Status.Addresses)
	}
	if n.Status.NodeInfo.KubeletVersion != KubeletVersion || n.Status.NodeInfo.ContainerRuntimeVersion != "orca://wasm,runc" {
		t.Errorf("nodeInfo %+v", n.Status.NodeInfo)
	}
	if n.Status.NodeInfo.KernelVersion == "" || n.Status.NodeInfo.OSImage == "" || n.Status.NodeInfo.BootID == "" {
		t.Errorf("nodeInfo lacks kernel, OS image or boot ID: %+v", n.Status.NodeInfo)
	}
	if c := nodeReady(n); c.Status != corev1.ConditionTrue || c.Reason != "KubeletReady" {
		t.Errorf("Ready condition %+v", c)
	}
	for _, ct := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		found := false
		for _, c := range n.Status.Conditions {
			if c.Type == ct {
				found = c.Status == corev1.ConditionFalse
			}
		}
		if !found {
			t.Errorf("condition %s is not False", ct)
		}
	}

	// The node lifecycle controller marks the node Unknown; the agent
	// notices at its next heartbeat and sets it Ready again.
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].Status = corev1.ConditionUnknown
			n.Status.Conditions[i].Reason = "NodeStatusUnknown"
		}
	}
	if _, err := e.s.Update(context.Background(), store.Nodes, n); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 3*time.Second, func() error {
		n, err := getNode(e, "edge-1")
		if err != nil {
			return err
		}
		if c := nodeReady(n); c.Status != corev1.ConditionTrue {
			return fmt.Errorf("Ready %s", c.Status)
		}
		return nil
	})
}

func TestLeaseRenewed(t *testing.T) {
	e := newEnv(t)
	e.agent("edge-2", nil)
	var first time.Time
	storetest.Eventually(t, 3*time.Second, func() error {
		o, err := e.s.Get(context.Background(), store.Leases, corev1.NamespaceNodeLease, "edge-2")
		if err != nil {
			return err
		}
		l := o.(*coordinationv1.Lease)
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "edge-2" || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 40 {
			return fmt.Errorf("lease spec %+v", l.Spec)
		}
		first = l.Spec.RenewTime.Time
		n, err := getNode(e, "edge-2")
		if err != nil {
			return err
		}
		if n.UID == "" || n.CreationTimestamp.IsZero() || len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != n.UID || l.OwnerReferences[0].Kind != "Node" {
			return fmt.Errorf("node uid %q created %v, lease owners %+v", n.UID, n.CreationTimestamp, l.OwnerReferences)
		}
		return nil
	})
	storetest.Eventually(t, 3*time.Second, func() error {
		o, err := e.s.Get(context.Background(), store.Leases, corev1.NamespaceNodeLease, "edge-2")
		if err != nil {
			return err
		}
		if rt := o.(*coordinationv1.Lease).Spec.RenewTime.Time; !rt.After(first) {
			return fmt.Errorf("renewTime %s not after %s", rt, first)
		}
		return nil
	})
}
