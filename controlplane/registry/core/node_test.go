package core

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func TestNode(t *testing.T) {
	node := func(capacity string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Labels: map[string]string{"node-role.kubernetes.io/edge": ""}},
			Status: corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(capacity)},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	}
	registrytest.Run(t, Node(), []registrytest.Case{
		{Name: "valid", Obj: node("4")},
		{Name: "negative capacity", Obj: node("-1"), Errors: []string{"FieldValueInvalid:status.capacity[cpu]"}},
		{Name: "spec update keeps status", Old: node("4"), Obj: func() *corev1.Node { n := node("8"); n.Spec.Unschedulable = true; return n }(),
			Check: func(t *testing.T, out store.Object) {
				n := out.(*corev1.Node)
				if q := n.Status.Capacity[corev1.ResourceCPU]; !n.Spec.Unschedulable || q.String() != "4" {
					t.Errorf("node %+v", n)
				}
			}},
		{Name: "podCIDR set from empty", Old: node("4"), Obj: withCIDR(node("4"), "10.1.0.0/24")},
		{Name: "podCIDR changed", Old: withCIDR(node("4"), "10.1.0.0/24"), Obj: withCIDR(node("4"), "10.2.0.0/24"),
			Errors: []string{"FieldValueForbidden:spec.podCIDR", "FieldValueForbidden:spec.podCIDRs"}},
		{Name: "podCIDRs removed", Old: withCIDR(node("4"), "10.1.0.0/24"), Obj: node("4"),
			Errors: []string{"FieldValueForbidden:spec.podCIDR", "FieldValueForbidden:spec.podCIDRs"}},
		{Name: "providerID changed", Old: func() *corev1.Node { n := node("4"); n.Spec.ProviderID = "orca://a"; return n }(),
			Obj: func() *corev1.Node { n := node("4"); n.Spec.ProviderID = "orca://b"; return n }(), Errors: []string{"FieldValueForbidden:spec.providerID"}},
	})
	registrytest.CheckTable(t, Node(), node("4"))
	if row := Node().Row(node("4")); row[1] != "Ready" || row[2] != "edge" {
		t.Errorf("row %v", row)
	}
}

func withCIDR(n *corev1.Node, cidr string) *corev1.Node {
	n.Spec.PodCIDR, n.Spec.PodCIDRs = cidr, []string{cidr}
	return n
}
