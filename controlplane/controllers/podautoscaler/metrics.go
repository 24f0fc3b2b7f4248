package podautoscaler

import (
	"errors"
	"fmt"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
)

// Errors of the metric sources orca does not serve, in the words of a
// Kubernetes cluster without the custom and external metrics APIs.
var (
	errNoCustomMetrics   = errors.New("unable to fetch metrics from custom metrics API: the server could not find the requested resource (custom.metrics.k8s.io is not served by orca)")
	errNoExternalMetrics = errors.New("unable to fetch metrics from external metrics API: the server could not find the requested resource (external.metrics.k8s.io is not served by orca)")
)

// computeReplicasForMetrics is Kubernetes' function of that name: the
// largest proposal of hpa's metrics, the metric that made it, and each
// metric's status (an empty one for a metric that failed). It returns -1
// and an error when every metric failed, or when some failed and the
// others propose a scale-down; a proposal with an error when some failed
// and the others do not scale down.
func (c *Controller) computeReplicasForMetrics(now time.Time, hpa *autoscalingv2.HorizontalPodAutoscaler, specReplicas, statusReplicas int32, selectorStr string) (int32, string, []autoscalingv2.MetricStatus, error) {
	if selectorStr == "" {
		msg := "selector is required"
		c.rec.Event(hpa, "", corev1.EventTypeWarning, "SelectorRequired", msg)
		setCondition(hpa, now, autoscalingv2.ScalingActive, corev1.ConditionFalse, "InvalidSelector", "the HPA target's scale is missing a selector")
		return -1, "", nil, errors.New(msg)
	}
	selector, err := labels.Parse(selectorStr)
	if err != nil {
		msg := fmt.Sprintf("couldn't convert selector into a corresponding internal selector object: %v", err)
		c.rec.Event(hpa, "", corev1.EventTypeWarning, "InvalidSelector", msg)
		setCondition(hpa, now, autoscalingv2.ScalingActive, corev1.ConditionFalse, "InvalidSelector", "%s", msg)
		return -1, "", nil, errors.New(msg)
	}
	specs := hpa.Spec.Metrics
	statuses := make([]autoscalingv2.MetricStatus, len(specs))
	var (
		replicas    int32
		metric      string
		invalid     int
		firstErr    error
		firstReason string
	)
	for i, spec := range specs {
		proposal, name, reason, err := c.computeReplicasForMetric(now, hpa, spec, specReplicas, selector, &statuses[i])
		if err != nil {
			if invalid == 0 {
				firstErr, firstReason = err, reason
			}
			invalid++
			continue
		}
		if replicas == 0 || proposal > replicas {
			replicas, metric = proposal, name
		}
	}
	if firstErr != nil {
		firstErr = fmt.Errorf("invalid metrics (%v invalid out of %v), first error is: %w", invalid, len(specs), firstErr)
	}
	if len(specs) == 0 || invalid >= len(specs) || (invalid > 0 && replicas < specReplicas) {
		if firstErr == nil {
			firstErr, firstReason = errors.New("no metrics"), "InvalidMetricSourceType"
		}
		setCondition(hpa, now, autoscalingv2.ScalingActive, corev1.ConditionFalse, firstReason, "the HPA was unable to compute the replica count: %v", unwrapFirst(firstErr))
		return -1, "", statuses, firstErr
	}
	setCondition(hpa, now, autoscalingv2.ScalingActive, corev1.ConditionTrue, "ValidMetricFound", "the HPA was able to successfully calculate a replica count from %s", metric)
	return replicas, metric, statuses, firstErr
}

// metricError is a metric's failure with the condition reason it gives
// ("FailedGetResourceMetric"); the condition's message names the
// underlying error, as Kubernetes' getUnableComputeReplicaCountCondition.
type metricError struct {
	cause error
	wrap  string
}

func (e *metricError) Error() string { return fmt.Sprintf("%s: %v", e.wrap, e.cause) }
func (e *metricError) Unwrap() error { return e.cause }

func unwrapFirst(err error) error {
	var me *metricError
	if errors.As(err, &me) {
		return me.cause
	}
	return err
}

// computeReplicasForMetric is one metric's proposal, its name for the
// rescale reason ("cpu resource utilization (percentage of request)"),
// or the failure's condition reason and error (also recorded as a
// Warning Event of that reason).
func (c *Controller) computeReplicasForMetric(now time.Time, hpa *autoscalingv2.HorizontalPodAutoscaler, spec autoscalingv2.MetricSpec, specReplicas int32, selector labels.Selector, status *autoscalingv2.MetricStatus) (int32, string, string, error) {
	fail := func(reason, wrap string, err error) (int32, string, string, error) {
		c.rec.Event(hpa, "", corev1.EventTypeWarning, reason, err.Error())
		return 0, "", reason, &metricError{cause: err, wrap: wrap}
	}
	switch spec.Type {
	case autoscalingv2.ResourceMetricSourceType:
		if spec.Resource == nil {
			return fail("FailedGetResourceMetric", "failed to get resource metric", errors.New("invalid resource metric source: resource is not set"))
		}
		replicas, name, cur, err := c.resourceReplicas(now, hpa.Namespace, specReplicas, spec.Resource.Name, "", spec.Resource.Target, selector)
		if err != nil {
			return fail("FailedGetResourceMetric", fmt.Sprintf("failed to get %s utilization", spec.Resource.Name), err)
		}
		*status = autoscalingv2.MetricStatus{Type: spec.Type, Resource: &autoscalingv2.ResourceMetricStatus{Name: spec.Resource.Name, Current: cur}}
		return replicas, name + " resource" + targetSuffix(spec.Resource.Target), "", nil
	case autoscalingv2.ContainerResourceMetricSourceType:
		if spec.ContainerResource == nil {
			return fail("FailedGetContainerResourceMetric", "failed to get container resource metric", errors.New("invalid container resource metric source: containerResource is not set"))
		}
		cr := spec.ContainerResource
		replicas, name, cur, err := c.resourceReplicas(now, hpa.Namespace, specReplicas, cr.Name, cr.Container, cr.Target, selector)
		if err != nil {
			return fail("FailedGetContainerResourceMetric", fmt.Sprintf("failed to get %s container metric value", cr.Name), err)
		}
		*status = autoscalingv2.MetricStatus{Type: spec.Type, ContainerResource: &autoscalingv2.ContainerResourceMetricStatus{Name: cr.Name, Container: cr.Container, Current: cur}}
		return replicas, name + " container resource" + targetSuffix(cr.Target), "", nil
	case autoscalingv2.PodsMetricSourceType:
		n := ""
		if spec.Pods != nil {
			n = spec.Pods.Metric.Name
		}
		return fail("FailedGetPodsMetric", "failed to get pods metric value", fmt.Errorf("unable to get metric %s: %w", n, errNoCustomMetrics))
	case autoscalingv2.ObjectMetricSourceType:
		n, obj := "", ""
		if spec.Object != nil {
			n, obj = spec.Object.Metric.Name, fmt.Sprintf("%s %s/%s", spec.Object.DescribedObject.Kind, hpa.Namespace, spec.Object.DescribedObject.Name)
		}
		return fail("FailedGetObjectMetric", "failed to get object metric value", fmt.Errorf("unable to get metric %s: %s on %w", n, obj, errNoCustomMetrics))
	case autoscalingv2.ExternalMetricSourceType:
		n := ""
		if spec.External != nil {
			n = spec.External.Metric.Name
		}
		return fail("FailedGetExternalMetric", "failed to get external metric value", fmt.Errorf("unable to get external metric %s/%s: %w", hpa.Namespace, n, errNoExternalMetrics))
	}
	return fail("InvalidMetricSourceType", "invalid metric", fmt.Errorf("unknown metric source type %q", string(spec.Type)))
}

// targetSuffix completes a metric's name in the rescale reason: " utilization
// (percentage of request)" for a Utilization target.
func targetSuffix(t autoscalingv2.MetricTarget) string {
	if t.AverageValue == nil && t.AverageUtilization != nil {
		return " utilization (percentage of request)"
	}
	return ""
}

// resourceReplicas is Kubernetes' computeStatusForResourceMetric (and
// its container form): AverageValue targets the average usage per pod,
// AverageUtilization the percentage of the requests.
func (c *Controller) resourceReplicas(now time.Time, namespace string, currentReplicas int32, res corev1.ResourceName, container string, target autoscalingv2.MetricTarget, selector labels.Selector) (int32, string, autoscalingv2.MetricValueStatus, error) {
	var pods []*corev1.Pod
	for _, o := range c.pods.List(namespace, selector) {
		pods = append(pods, o.(*corev1.Pod))
	}
	metrics := c.podMetrics(now, namespace, pods, res, container)
	if len(metrics) == 0 {
		return 0, "", autoscalingv2.MetricValueStatus{}, fmt.Errorf("unable to get metrics for resource %s: no metrics returned from resource metrics API", res)
	}
	if target.AverageValue != nil {
		replicas, avg, err := c.calc.PlainReplicas(now, currentReplicas, target.AverageValue.MilliValue(), res, pods, metrics)
		if err != nil {
			return 0, "", autoscalingv2.MetricValueStatus{}, err
		}
		return replicas, string(res), autoscalingv2.MetricValueStatus{AverageValue: resource.NewMilliQuantity(avg, resource.DecimalSI)}, nil
	}
	if target.AverageUtilization == nil {
		return 0, "", autoscalingv2.MetricValueStatus{}, errors.New("invalid resource metric source: neither a utilization target nor a value target was set")
	}
	replicas, util, raw, err := c.calc.ResourceReplicas(now, currentReplicas, *target.AverageUtilization, res, container, pods, metrics)
	if err != nil {
		return 0, "", autoscalingv2.MetricValueStatus{}, err
	}
	return replicas, string(res), autoscalingv2.MetricValueStatus{AverageUtilization: &util, AverageValue: resource.NewMilliQuantity(raw, resource.DecimalSI)}, nil
}

// podMetrics returns the usage of res (cpu or memory) of pods, of
// container alone when not "", from the agents' samples, as
// metrics-server's PodMetrics reach Kubernetes' metrics client: a pod
// without a fresh sample from its node (matching uid), with an empty
// window, or without the container, has none.
func (c *Controller) podMetrics(now time.Time, namespace string, pods []*corev1.Pod, res corev1.ResourceName, container string) PodMetricsInfo {
	if res != corev1.ResourceCPU && res != corev1.ResourceMemory {
		return nil
	}
	byName := make(map[string]*corev1.Pod, len(pods))
	for _, p := range pods {
		byName[p.Name] = p
	}
	out := PodMetricsInfo{}
	for _, ps := range c.metrics.PodSamples(namespace, now) {
		p := byName[ps.Name]
		if p == nil || !ps.Of(string(p.UID), p.Spec.NodeName) || ps.Window <= 0 {
			continue
		}
		var nanocores, bytes uint64
		found := false
		for _, cs := range ps.Containers {
			if container == "" || cs.Name == container {
				found = true
				nanocores += cs.CPU
				bytes += cs.Memory
			}
		}
		if !found {
			continue
		}
		v := int64(bytes) * 1000 // milli-units, as Quantity.MilliValue
		if res == corev1.ResourceCPU {
			v = int64(nanocores / 1_000_000)
		}
		out[p.Name] = PodMetric{Timestamp: ps.Timestamp, Window: ps.Window, Value: v}
	}
	return out
}
