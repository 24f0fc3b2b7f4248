package podautoscaler

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// calcCase is one case of the replica calculator, in the shape of
// Kubernetes' replica_calculator_test.go: pods with requests, readiness,
// phases and start times, their usage levels (a missing level: no
// sample), the target and the expected outcome.
type calcCase struct {
	name            string
	currentReplicas int32
	resource        corev1.ResourceName // default cpu
	container       string
	requests        []string // per pod, of the pod's one container "web"
	levels          []int64  // milli-units per pod; -1: no sample
	ready           []corev1.ConditionStatus
	phases          []corev1.PodPhase
	deleted         []bool
	started         []time.Duration // how long ago each pod started; default 1h
	readySince      []time.Duration // how long ago each Ready condition moved; default 1h
	target          int32           // utilization percent; or
	targetAverage   string          // an AverageValue target
	wantReplicas    int32
	wantUtilization int32
	wantAverage     int64
	wantErr         string
}

var calcNow = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func (tc calcCase) pods() ([]*corev1.Pod, PodMetricsInfo) {
	var pods []*corev1.Pod
	metrics := PodMetricsInfo{}
	res := tc.resource
	if res == "" {
		res = corev1.ResourceCPU
	}
	for i, req := range tc.requests {
		name := fmt.Sprintf("web-%d", i)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "web"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if req != "" {
			pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{res: resource.MustParse(req)}
		}
		if i < len(tc.phases) && tc.phases[i] != "" {
			pod.Status.Phase = tc.phases[i]
		}
		if i < len(tc.deleted) && tc.deleted[i] {
			pod.DeletionTimestamp = &metav1.Time{Time: calcNow}
		}
		started, readySince := time.Hour, time.Hour
		if i < len(tc.started) {
			started = tc.started[i]
		}
		if i < len(tc.readySince) {
			readySince = tc.readySince[i]
		}
		st := metav1.NewTime(calcNow.Add(-started))
		pod.Status.StartTime = &st
		cond := corev1.ConditionTrue
		if i < len(tc.ready) && tc.ready[i] != "" {
			cond = tc.ready[i]
		}
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cond, LastTransitionTime: metav1.NewTime(calcNow.Add(-readySince))}}
		pods = append(pods, pod)
		if i < len(tc.levels) && tc.levels[i] >= 0 {
			metrics[name] = PodMetric{Timestamp: calcNow.Add(-10 * time.Second), Window: 30 * time.Second, Value: tc.levels[i]}
		}
	}
	return pods, metrics
}

var calc = ReplicaCalculator{Tolerance: DefaultTolerance, CPUInitializationPeriod: DefaultCPUInitializationPeriod, InitialReadinessDelay: DefaultInitialReadinessDelay}

func TestResourceReplicas(t *testing.T) {
	F, T := corev1.ConditionFalse, corev1.ConditionTrue
	for _, tc := range []calcCase{
		{name: "scale up", currentReplicas: 3, requests: []string{"1", "1", "1"}, levels: []int64{300, 500, 700}, target: 30, wantReplicas: 5, wantUtilization: 50, wantAverage: 500},
		{name: "scale down", currentReplicas: 5, requests: []string{"1", "1", "1", "1", "1"}, levels: []int64{100, 300, 500, 250, 250}, target: 50, wantReplicas: 3, wantUtilization: 28, wantAverage: 280},
		{name: "within tolerance", currentReplicas: 3, requests: []string{"900m", "1", "1100m"}, levels: []int64{1010, 1030, 1020}, target: 100, wantReplicas: 3, wantUtilization: 102, wantAverage: 1020},
		{name: "just outside tolerance", currentReplicas: 3, requests: []string{"1", "1", "1"}, levels: []int64{1110, 1110, 1110}, target: 100, wantReplicas: 4, wantUtilization: 111, wantAverage: 1110},
		// An unready pod counts as 0% on a scale-up: 1200m of 2000m is
		// 60% (ratio 2), with the unready pod 40% (ratio 1.33) of 3 pods.
		{name: "scale up with an unready pod", currentReplicas: 3, requests: []string{"1", "1", "1"}, levels: []int64{300, 500, 700}, ready: []corev1.ConditionStatus{F, T, T}, target: 30, wantReplicas: 4, wantUtilization: 60, wantAverage: 600},
		// Unready pods at 0% pull the ratio back within the tolerance.
		{name: "scale up unready, hot pod, no scale", currentReplicas: 3, requests: []string{"1", "1", "1"}, levels: []int64{100, 100, 1100}, ready: []corev1.ConditionStatus{F, F, T}, target: 40, wantReplicas: 3, wantUtilization: 110, wantAverage: 1100},
		// A scale-down ignores unready pods (no rebalancing).
		{name: "scale down ignores unready", currentReplicas: 5, requests: []string{"1", "1", "1", "1", "1"}, levels: []int64{100, 300, 500, 250, 250}, ready: []corev1.ConditionStatus{T, T, T, F, F}, target: 50, wantReplicas: 2, wantUtilization: 30, wantAverage: 300},
		{name: "pending pods are unready", currentReplicas: 3, requests: []string{"1", "1", "1"}, levels: []int64{300, 500, 700}, phases: []corev1.PodPhase{corev1.PodPending}, target: 30, wantReplicas: 4, wantUtilization: 60, wantAverage: 600},
		{name: "failed and deleted pods are ignored", currentReplicas: 3, requests: []string{"1", "1", "1", "1"}, levels: []int64{500, 700, 9000, 9000}, phases: []corev1.PodPhase{"", "", corev1.PodFailed}, deleted: []bool{false, false, false, true}, target: 30, wantReplicas: 4, wantUtilization: 60, wantAverage: 600},
		// On a scale-up a pod without a sample uses 0%: 1200m/3000m is
		// 40%, ratio 1.33 of 3.
		{name: "missing metrics on a scale up", currentReplicas: 3, requests: []string{"1", "1", "1"}, levels: []int64{500, 700, -1}, target: 30, wantReplicas: 4, wantUtilization: 60, wantAverage: 600},
		// On a scale-down it uses 100%: 400m+1000m of 3000m is 46%, ratio
		// 0.93, within the tolerance.
		{name: "missing metrics on a scale down, no change", currentReplicas: 3, requests: []string{"1", "1", "1"}, levels: []int64{200, 200, -1}, target: 50, wantReplicas: 3, wantUtilization: 20, wantAverage: 200},
		{name: "missing metrics on a scale down", currentReplicas: 4, requests: []string{"1", "1", "1", "1"}, levels: []int64{100, 100, 100, -1}, target: 50, wantReplicas: 3, wantUtilization: 10, wantAverage: 100},
		// Missing pods at 100% turning a scale-down into a scale-up keep
		// the count.
		{name: "missing metrics reverse the direction", currentReplicas: 2, requests: []string{"1", "1"}, levels: []int64{700, -1}, target: 80, wantReplicas: 2, wantUtilization: 70, wantAverage: 700},
		// A pod in its CPU initialization period whose sample does not
		// cover a full window since it became ready is unready.
		{name: "cpu initialization period", currentReplicas: 2, requests: []string{"1", "1"}, levels: []int64{900, 500}, started: []time.Duration{time.Minute, time.Hour}, readySince: []time.Duration{20 * time.Second, time.Hour}, target: 50, wantReplicas: 2, wantUtilization: 50, wantAverage: 500},
		{name: "after the initialization period the sample counts", currentReplicas: 2, requests: []string{"1", "1"}, levels: []int64{900, 500}, started: []time.Duration{10 * time.Minute, time.Hour}, readySince: []time.Duration{20 * time.Second, time.Hour}, target: 50, wantReplicas: 3, wantUtilization: 70, wantAverage: 700},
		// Unready long after the start (it was ready once): counted.
		{name: "unready after having been ready", currentReplicas: 2, requests: []string{"1", "1"}, levels: []int64{900, 100}, ready: []corev1.ConditionStatus{F, T}, started: []time.Duration{time.Hour, time.Hour}, readySince: []time.Duration{time.Minute, time.Hour}, target: 25, wantReplicas: 4, wantUtilization: 50, wantAverage: 500},
		// Readiness does not matter for memory.
		{name: "memory ignores readiness", resource: corev1.ResourceMemory, currentReplicas: 2, requests: []string{"100Mi", "100Mi"}, levels: []int64{80 << 20 * 1000, 80 << 20 * 1000}, ready: []corev1.ConditionStatus{F, F}, target: 40, wantReplicas: 4, wantUtilization: 80, wantAverage: 80 << 20 * 1000},
		{name: "average value target", currentReplicas: 2, requests: []string{"1", "1"}, levels: []int64{400, 600}, targetAverage: "250m", wantReplicas: 4, wantAverage: 500},
		{name: "average value within tolerance", currentReplicas: 2, requests: []string{"1", "1"}, levels: []int64{500, 540}, targetAverage: "500m", wantReplicas: 2, wantAverage: 520},
		{name: "average value, missing on a scale down", currentReplicas: 3, requests: []string{"1", "1", "1"}, levels: []int64{100, 100, -1}, targetAverage: "500m", wantReplicas: 2, wantAverage: 100},
		{name: "no pods", currentReplicas: 1, target: 50, wantErr: errNoPods.Error()},
		{name: "no sample of a ready pod", currentReplicas: 2, requests: []string{"1", "1"}, levels: []int64{500, 500}, ready: []corev1.ConditionStatus{F, F}, started: []time.Duration{time.Minute, time.Minute}, target: 50, wantErr: errNoReadyPods.Error()},
		{name: "missing request", currentReplicas: 2, requests: []string{"1", ""}, levels: []int64{500, 500}, target: 50, wantErr: "missing request for cpu in container web of Pod web-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods, metrics := tc.pods()
			res := tc.resource
			if res == "" {
				res = corev1.ResourceCPU
			}
			var (
				replicas, util int32
				avg            int64
				err            error
			)
			if tc.targetAverage != "" {
				q := resource.MustParse(tc.targetAverage)
				replicas, avg, err = calc.PlainReplicas(calcNow, tc.currentReplicas, q.MilliValue(), res, pods, metrics)
			} else {
				replicas, util, avg, err = calc.ResourceReplicas(calcNow, tc.currentReplicas, tc.target, res, tc.container, pods, metrics)
			}
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if replicas != tc.wantReplicas || util != tc.wantUtilization || avg != tc.wantAverage {
				t.Fatalf("replicas %d, utilization %d%%, average %d; want %d, %d%%, %d", replicas, util, avg, tc.wantReplicas, tc.wantUtilization, tc.wantAverage)
			}
		})
	}
}

// A ContainerResource metric counts the named container's request only
// (and a sidecar's requests are part of the pod's).
func TestPodRequests(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5")}}},
			{Name: "sidecar", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}}}},
		Containers: []corev1.Container{{Name: "web", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}}},
			{Name: "log", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}}
	for container, want := range map[string]int64{"": 350, "web": 200, "log": 100, "sidecar": 50, "init": 0} {
		got, err := podRequests([]*corev1.Pod{pod}, container, corev1.ResourceCPU)
		if err != nil || got["p"] != want {
			t.Errorf("requests of %q: %v, %v; want %d", container, got, err, want)
		}
	}
}
