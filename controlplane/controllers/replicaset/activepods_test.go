package replicaset

import (
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDeleteFirstOrdering(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := func(name, node string, phase corev1.PodPhase, readySince *time.Time, created time.Time) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
		if readySince != nil {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(*readySince)}}
		}
		return p
	}
	early, late := t0.Add(time.Minute), t0.Add(2*time.Minute)
	// Listed in the order they must be deleted.
	want := []*corev1.Pod{
		pod("unscheduled", "", corev1.PodPending, nil, t0),
		pod("pending", "n", corev1.PodPending, nil, t0),
		pod("unknown", "n", corev1.PodUnknown, nil, t0),
		pod("running-notready-newer", "n", corev1.PodRunning, nil, t0.Add(time.Second)),
		pod("running-notready-older", "n", corev1.PodRunning, nil, t0),
		pod("ready-recently", "n", corev1.PodRunning, &late, t0),
		pod("ready-long", "n", corev1.PodRunning, &early, t0),
	}
	got := append([]*corev1.Pod(nil), want...)
	for i, j := 0, len(got)-1; i < j; i, j = i+1, j-1 {
		got[i], got[j] = got[j], got[i]
	}
	sort.SliceStable(got, func(i, j int) bool { return deleteFirst(got[i], got[j]) })
	for i := range want {
		if got[i].Name != want[i].Name {
			var names []string
			for _, p := range got {
				names = append(names, p.Name)
			}
			t.Fatalf("order %v", names)
		}
	}
}
