package selectorspread

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

func owned(ns, name string, owner types.UID) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)}}
	if owner != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: owner, Controller: &yes}}
	}
	return p
}

func TestScore(t *testing.T) {
	mk := func(name string, pods ...*corev1.Pod) *framework.NodeInfo {
		return framework.NewNodeInfo(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, pods...)
	}
	nodes := []*framework.NodeInfo{
		mk("empty"),
		mk("one", owned("default", "a", "rs1"), owned("default", "x", "rs2"), owned("other", "y", "rs1")),
		mk("two", owned("default", "b", "rs1"), owned("default", "c", "rs1")),
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want map[string]int64
	}{
		{"siblings spread", owned("default", "new", "rs1"), map[string]int64{"empty": 100, "one": 50, "two": 0}},
		{"no siblings anywhere", owned("default", "new", "rs9"), map[string]int64{"empty": 100, "one": 100, "two": 100}},
		{"other controller", owned("default", "new", "rs2"), map[string]int64{"empty": 100, "one": 0, "two": 100}},
		{"no controller", owned("default", "new", ""), map[string]int64{"empty": 0, "one": 0, "two": 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, n := range nodes {
				got, st := New().Score(context.Background(), tt.pod, n, nodes)
				if !st.IsSuccess() || got != tt.want[n.Name()] {
					t.Errorf("%s: %d, want %d", n.Name(), got, tt.want[n.Name()])
				}
			}
		})
	}
}
