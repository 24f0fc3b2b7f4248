package framework

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDefaultNormalizeScore(t *testing.T) {
	tests := []struct {
		name    string
		reverse bool
		in      []int64
		want    []int64
	}{
		{"scaled to the highest", false, []int64{10, 30, 40, 0}, []int64{25, 75, 100, 0}},
		{"reversed", true, []int64{0, 1, 2}, []int64{100, 50, 0}},
		{"all zero", false, []int64{0, 0}, []int64{0, 0}},
		{"all zero reversed", true, []int64{0, 0}, []int64{100, 100}},
		{"rounds down", false, []int64{1, 3}, []int64{33, 100}},
		{"no nodes", false, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scores := make([]NodeScore, len(tt.in))
			for i, v := range tt.in {
				scores[i] = NodeScore{Name: string(rune('a' + i)), Score: v}
			}
			DefaultNormalizeScore(MaxNodeScore, tt.reverse, scores)
			var got []int64
			for _, s := range scores {
				got = append(got, s.Score)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNormalizedScore(t *testing.T) {
	mk := func(name string) *NodeInfo {
		return NewNodeInfo(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	nodes := []*NodeInfo{mk("a"), mk("b"), mk("c")}
	raw := map[string]int64{"a": 1, "b": 4, "c": 2, "x": 8}
	normalize := func(_ context.Context, _ *corev1.Pod, s []NodeScore) *Status {
		DefaultNormalizeScore(MaxNodeScore, false, s)
		return nil
	}
	for name, want := range map[*NodeInfo]int64{nodes[0]: 25, nodes[1]: 100, nodes[2]: 50, mk("x"): 100} {
		got, st := NormalizedScore(context.Background(), nil, name, nodes, func(n *NodeInfo) int64 { return raw[n.Name()] }, normalize)
		if !st.IsSuccess() || got != want {
			t.Errorf("%s: %d (%v), want %d", name.Name(), got, st, want)
		}
	}
}

func TestCycleState(t *testing.T) {
	pod, other := &corev1.Pod{}, &corev1.Pod{}
	computed := 0
	compute := func() int { computed++; return -1 }
	ctx := ContextWithCycleState(context.Background(), NewCycleState())
	WriteState(ctx, "k", pod, 7)
	if v := ReadState(ctx, "k", pod, compute); v != 7 || computed != 0 {
		t.Fatalf("read %d (computed %d times), want the stored 7", v, computed)
	}
	if v := ReadState(ctx, "k", other, compute); v != -1 {
		t.Fatalf("read %d for another pod, want it computed", v)
	}
	if v := ReadState(ctx, "missing", pod, compute); v != -1 {
		t.Fatalf("read %d under a missing key, want it computed", v)
	}
	if v := ReadState(context.Background(), "k", pod, compute); v != -1 {
		t.Fatalf("read %d outside a cycle, want it computed", v)
	}
	WriteState(context.Background(), "k", pod, 1) // no state: nothing happens
	var nilState *CycleState
	if _, ok := nilState.Read("k"); ok {
		t.Fatal("a nil state holds something")
	}
}
