package scheduler

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// BenchmarkSchedulingCycle measures one scheduling cycle alone (snapshot
// update, pre-filter, filter, pre-score, score, normalise, assume) of a
// bare pod, with N nodes holding 10 pods each, no store write: the
// scheduler's own share of BenchmarkScheduling. It reports cycles/s.
func BenchmarkSchedulingCycle(b *testing.B) {
	for _, nodes := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			s, err := New(Config{Store: storetest.NewStore(b)})
			if err != nil {
				b.Fatal(err)
			}
			res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
			for i := range nodes {
				name := fmt.Sprintf("node-%05d", i)
				s.cache.AddNode(&corev1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{nodeapi.RuntimeLabel(nodeapi.HandlerContainerd): "true", corev1.LabelHostname: name}},
					Status:     corev1.NodeStatus{Capacity: res, Allocatable: res, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
				})
				for j := range 10 {
					p := benchPod(fmt.Sprintf("bound-%05d-%d", i, j))
					p.Spec.NodeName = name
					if err := s.cache.AddPod(p); err != nil {
						b.Fatal(err)
					}
				}
			}
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				s.cache.UpdateSnapshot(s.snapshot)
				pod := benchPod(fmt.Sprintf("pod-%d", i))
				node, fitErr, err := s.findNode(ctx, pod, s.snapshot.List())
				if err != nil || fitErr != nil {
					b.Fatal(err, fitErr)
				}
				assumed := pod.DeepCopy()
				assumed.Spec.NodeName = node
				if err := s.cache.AssumePod(assumed); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
		})
	}
}

func benchPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{SchedulerName: DefaultSchedulerName, Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}},
	}
}
