package podautoscaler

import (
	"errors"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
)

// PodMetric is one pod's usage of a resource: Value in milli-units
// (millicores of CPU, thousandths of a byte of memory, as Quantity's
// MilliValue), the rate or level measured over Window ending at
// Timestamp.
type PodMetric struct {
	Timestamp time.Time
	Window    time.Duration
	Value     int64
}

// PodMetricsInfo is the usage of the pods that have a sample, by pod name.
type PodMetricsInfo map[string]PodMetric

// ReplicaCalculator computes desired replica counts from pods and their
// usage, as kube-controller-manager's podautoscaler ReplicaCalculator
// (replica_calculator.go). Its zero value has no tolerance; use
// DefaultTolerance and the other defaults of Options.
type ReplicaCalculator struct {
	// Tolerance is the fraction by which the usage ratio may differ from
	// 1.0 without a rescale (0.1: 10%).
	Tolerance float64
	// CPUInitializationPeriod is how long after a pod started its CPU
	// samples are only used once they cover a full window since the pod
	// became Ready (and not at all while it is unready).
	CPUInitializationPeriod time.Duration
	// InitialReadinessDelay is how long after its start an unready pod
	// counts as never having been ready yet (its CPU sample is ignored).
	InitialReadinessDelay time.Duration
}

// Errors of the calculation, with Kubernetes' messages.
var (
	errNoPods      = errors.New("no pods returned by selector while calculating replica count")
	errNoReadyPods = errors.New("did not receive metrics for targeted pods (pods might be unready)")
	errNoKnownPods = errors.New("no metrics returned matched known pods")
	errBadTarget   = errors.New("the target average value must be positive")
)

// ResourceReplicas returns the replica count that brings the pods' average
// usage of resource to targetUtilization percent of their requests (of
// container alone when container is not ""), with the current
// utilization (percent) and average raw usage (milli-units), as
// Kubernetes' GetResourceReplicas:
//   - pods being deleted or failed are left out; pending pods, and for CPU
//     pods in their initialization period (groupPods), are unready;
//   - within Tolerance of the target the count stays currentReplicas;
//   - pods without a sample count as using 100% of their request (or the
//     target, when above 100%) on a scale-down and 0% on a scale-up, and
//     unready pods as 0% on a scale-up; a rescale that this reverses, or
//     that falls back within tolerance, keeps currentReplicas.
//
// It fails when no pod matches, a pod lacks the request, or no pod has a
// usable sample.
func (c ReplicaCalculator) ResourceReplicas(now time.Time, currentReplicas, targetUtilization int32, resource corev1.ResourceName, container string, pods []*corev1.Pod, metrics PodMetricsInfo) (replicas, utilization int32, rawUtilization int64, err error) {
	if len(pods) == 0 {
		return 0, 0, 0, errNoPods
	}
	metrics = copyMetrics(metrics)
	readyPodCount, unready, missing, ignored := c.groupPods(now, pods, metrics, resource)
	removeMetricsForPods(metrics, ignored)
	removeMetricsForPods(metrics, unready)
	requests, err := podRequests(pods, container, resource)
	if err != nil {
		return 0, 0, 0, err
	}
	if len(metrics) == 0 {
		return 0, 0, 0, errNoReadyPods
	}
	usageRatio, utilization, rawUtilization, err := resourceUtilizationRatio(metrics, requests, targetUtilization)
	if err != nil {
		return 0, 0, 0, err
	}
	scaleUpWithUnready := len(unready) > 0 && usageRatio > 1.0
	if !scaleUpWithUnready && len(missing) == 0 {
		if c.within(usageRatio) {
			return currentReplicas, utilization, rawUtilization, nil
		}
		return int32(math.Ceil(usageRatio * float64(readyPodCount))), utilization, rawUtilization, nil
	}
	if len(missing) > 0 {
		switch {
		case usageRatio < 1.0:
			// A scale-down: the pods without samples use their whole
			// request, or the target when that is higher.
			fallback := int64(max(100, targetUtilization))
			for name := range missing {
				metrics[name] = PodMetric{Value: requests[name] * fallback / 100}
			}
		case usageRatio > 1.0:
			for name := range missing {
				metrics[name] = PodMetric{Value: 0}
			}
		}
	}
	if scaleUpWithUnready {
		for name := range unready {
			metrics[name] = PodMetric{Value: 0}
		}
	}
	newUsageRatio, _, _, err := resourceUtilizationRatio(metrics, requests, targetUtilization)
	if err != nil {
		return 0, utilization, rawUtilization, err
	}
	if c.within(newUsageRatio) || (usageRatio < 1.0 && newUsageRatio > 1.0) || (usageRatio > 1.0 && newUsageRatio < 1.0) {
		return currentReplicas, utilization, rawUtilization, nil
	}
	newReplicas := int32(math.Ceil(newUsageRatio * float64(len(metrics))))
	if (newUsageRatio < 1.0 && newReplicas > currentReplicas) || (newUsageRatio > 1.0 && newReplicas < currentReplicas) {
		return currentReplicas, utilization, rawUtilization, nil
	}
	return newReplicas, utilization, rawUtilization, nil
}

// PlainReplicas returns the replica count that brings the pods' average
// usage of resource (of container alone when not "") to targetAverage
// milli-units per pod, and the current average, as Kubernetes'
// GetRawResourceReplicas (calcPlainMetricReplicas): the same grouping,
// tolerance and missing-sample rules as ResourceReplicas, a pod without a
// sample counting as at the target on a scale-down.
func (c ReplicaCalculator) PlainReplicas(now time.Time, currentReplicas int32, targetAverage int64, resource corev1.ResourceName, pods []*corev1.Pod, metrics PodMetricsInfo) (replicas int32, average int64, err error) {
	if len(pods) == 0 {
		return 0, 0, errNoPods
	}
	if targetAverage <= 0 {
		return 0, 0, errBadTarget
	}
	metrics = copyMetrics(metrics)
	readyPodCount, unready, missing, ignored := c.groupPods(now, pods, metrics, resource)
	removeMetricsForPods(metrics, ignored)
	removeMetricsForPods(metrics, unready)
	if len(metrics) == 0 {
		return 0, 0, errNoReadyPods
	}
	usageRatio, average := metricUsageRatio(metrics, targetAverage)
	scaleUpWithUnready := len(unready) > 0 && usageRatio > 1.0
	if !scaleUpWithUnready && len(missing) == 0 {
		if c.within(usageRatio) {
			return currentReplicas, average, nil
		}
		return int32(math.Ceil(usageRatio * float64(readyPodCount))), average, nil
	}
	if len(missing) > 0 {
		v := int64(0)
		if usageRatio < 1.0 {
			v = targetAverage
		}
		for name := range missing {
			metrics[name] = PodMetric{Value: v}
		}
	}
	if scaleUpWithUnready {
		for name := range unready {
			metrics[name] = PodMetric{Value: 0}
		}
	}
	newUsageRatio, _ := metricUsageRatio(metrics, targetAverage)
	if c.within(newUsageRatio) || (usageRatio < 1.0 && newUsageRatio > 1.0) || (usageRatio > 1.0 && newUsageRatio < 1.0) {
		return currentReplicas, average, nil
	}
	newReplicas := int32(math.Ceil(newUsageRatio * float64(len(metrics))))
	if (newUsageRatio < 1.0 && newReplicas > currentReplicas) || (newUsageRatio > 1.0 && newReplicas < currentReplicas) {
		return currentReplicas, average, nil
	}
	return newReplicas, average, nil
}

func (c ReplicaCalculator) within(usageRatio float64) bool {
	return math.Abs(1.0-usageRatio) <= c.Tolerance
}

// groupPods sorts pods as Kubernetes' groupPods: ignored (being deleted or
// failed), unready (pending; for CPU, without a Ready condition or start
// time, or in the initialization period while unready or with a sample
// not covering a full window since the Ready transition, or unready and
// never ready since InitialReadinessDelay after the start), missing (no
// sample) and ready, which it counts.
func (c ReplicaCalculator) groupPods(now time.Time, pods []*corev1.Pod, metrics PodMetricsInfo, resource corev1.ResourceName) (readyPodCount int, unready, missing, ignored sets.Set[string]) {
	unready, missing, ignored = sets.New[string](), sets.New[string](), sets.New[string]()
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed {
			ignored.Insert(pod.Name)
			continue
		}
		if pod.Status.Phase == corev1.PodPending {
			unready.Insert(pod.Name)
			continue
		}
		metric, found := metrics[pod.Name]
		if !found {
			missing.Insert(pod.Name)
			continue
		}
		if resource == corev1.ResourceCPU {
			var unreadyPod bool
			cond := ctrlutil.GetPodReadyCondition(&pod.Status)
			switch {
			case cond == nil || pod.Status.StartTime == nil:
				unreadyPod = true
			case pod.Status.StartTime.Add(c.CPUInitializationPeriod).After(now):
				unreadyPod = cond.Status == corev1.ConditionFalse || metric.Timestamp.Before(cond.LastTransitionTime.Add(metric.Window))
			default:
				unreadyPod = cond.Status == corev1.ConditionFalse && pod.Status.StartTime.Add(c.InitialReadinessDelay).After(cond.LastTransitionTime.Time)
			}
			if unreadyPod {
				unready.Insert(pod.Name)
				continue
			}
		}
		readyPodCount++
	}
	return readyPodCount, unready, missing, ignored
}

// podRequests sums each pod's request of resource over its containers
// and restartable init containers (sidecars), or of container alone, in
// milli-units; a container without the request is an error, as
// Kubernetes' calculateRequests.
func podRequests(pods []*corev1.Pod, container string, resource corev1.ResourceName) (map[string]int64, error) {
	requests := make(map[string]int64, len(pods))
	for _, pod := range pods {
		containers := append([]corev1.Container{}, pod.Spec.Containers...)
		for _, ic := range pod.Spec.InitContainers {
			if ic.RestartPolicy != nil && *ic.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				containers = append(containers, ic)
			}
		}
		var sum int64
		for _, ctr := range containers {
			if container != "" && ctr.Name != container {
				continue
			}
			q, ok := ctr.Resources.Requests[resource]
			if !ok {
				return nil, fmt.Errorf("missing request for %s in container %s of Pod %s", resource, ctr.Name, pod.Name)
			}
			sum += q.MilliValue()
		}
		requests[pod.Name] = sum
	}
	return requests, nil
}

// resourceUtilizationRatio is Kubernetes' GetResourceUtilizationRatio:
// the pods' total usage over their total request, in whole percent,
// divided by targetUtilization; with the average raw usage.
func resourceUtilizationRatio(metrics PodMetricsInfo, requests map[string]int64, targetUtilization int32) (ratio float64, utilization int32, rawAverage int64, err error) {
	var metricsTotal, requestsTotal int64
	n := 0
	for name, m := range metrics {
		req, ok := requests[name]
		if !ok {
			continue // a sample of a pod the selector did not return
		}
		metricsTotal += m.Value
		requestsTotal += req
		n++
	}
	if requestsTotal == 0 {
		return 0, 0, 0, errNoKnownPods
	}
	utilization = int32(metricsTotal * 100 / requestsTotal)
	return float64(utilization) / float64(targetUtilization), utilization, metricsTotal / int64(n), nil
}

// metricUsageRatio is Kubernetes' GetMetricUsageRatio: the average usage
// over targetAverage, and the average.
func metricUsageRatio(metrics PodMetricsInfo, targetAverage int64) (float64, int64) {
	var total int64
	for _, m := range metrics {
		total += m.Value
	}
	average := total / int64(len(metrics))
	return float64(average) / float64(targetAverage), average
}

func copyMetrics(m PodMetricsInfo) PodMetricsInfo {
	out := make(PodMetricsInfo, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func removeMetricsForPods(metrics PodMetricsInfo, pods sets.Set[string]) {
	for name := range pods {
		delete(metrics, name)
	}
}

// Defaults of kube-controller-manager's HPA flags.
const (
	// DefaultSyncPeriod is --horizontal-pod-autoscaler-sync-period.
	DefaultSyncPeriod = 15 * time.Second
	// DefaultTolerance is --horizontal-pod-autoscaler-tolerance.
	DefaultTolerance = 0.1
	// DefaultDownscaleStabilization is
	// --horizontal-pod-autoscaler-downscale-stabilization.
	DefaultDownscaleStabilization = 5 * time.Minute
	// DefaultCPUInitializationPeriod is
	// --horizontal-pod-autoscaler-cpu-initialization-period.
	DefaultCPUInitializationPeriod = 5 * time.Minute
	// DefaultInitialReadinessDelay is
	// --horizontal-pod-autoscaler-initial-readiness-delay.
	DefaultInitialReadinessDelay = 30 * time.Second
)
