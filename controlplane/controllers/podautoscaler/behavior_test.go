package podautoscaler

import (
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
)

func rules(window int32, sel autoscalingv2.ScalingPolicySelect, policies ...autoscalingv2.HPAScalingPolicy) *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &window, SelectPolicy: &sel, Policies: policies}
}

func pods(n, period int32) autoscalingv2.HPAScalingPolicy {
	return autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PodsScalingPolicy, Value: n, PeriodSeconds: period}
}

func percent(n, period int32) autoscalingv2.HPAScalingPolicy {
	return autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PercentScalingPolicy, Value: n, PeriodSeconds: period}
}

// event is a past rescale for a case: change replicas (positive: up) ago.
type event struct {
	change int32
	ago    time.Duration
}

// Cases in the spirit of Kubernetes' horizontal_test.go
// TestNormalizeDesiredReplicasWithBehavior, TestScalingWithRules and
// TestStabilizeRecommendationWithBehaviors.
func TestNormalizeWithBehavior(t *testing.T) {
	max, min, off := autoscalingv2.MaxChangePolicySelect, autoscalingv2.MinChangePolicySelect, autoscalingv2.DisabledPolicySelect
	defUp := rules(0, max, percent(100, 15), pods(4, 15))
	defDown := rules(300, max, percent(100, 15))
	for _, tc := range []struct {
		name                     string
		up, down                 *autoscalingv2.HPAScalingRules
		current, desired         int32
		minReplicas, maxReplicas int32
		recommendations          []event // change is the recommended count
		events                   []event
		want                     int32
		wantAble, wantLimit      string
	}{
		{name: "defaults double up", up: defUp, down: defDown, current: 10, desired: 50, minReplicas: 1, maxReplicas: 100, want: 20, wantAble: "ReadyForNewScale", wantLimit: "ScaleUpLimit"},
		{name: "defaults add 4 to few", up: defUp, down: defDown, current: 1, desired: 50, minReplicas: 1, maxReplicas: 100, want: 5, wantAble: "ReadyForNewScale", wantLimit: "ScaleUpLimit"},
		{name: "max replicas", up: defUp, down: defDown, current: 10, desired: 50, minReplicas: 1, maxReplicas: 12, want: 12, wantAble: "ReadyForNewScale", wantLimit: "TooManyReplicas"},
		{name: "within range", up: defUp, down: defDown, current: 10, desired: 15, minReplicas: 1, maxReplicas: 100, want: 15, wantAble: "ReadyForNewScale", wantLimit: "DesiredWithinRange"},
		{name: "selectPolicy Min up", up: rules(0, min, percent(100, 60), pods(4, 60)), down: defDown, current: 10, desired: 50, minReplicas: 1, maxReplicas: 100, want: 14, wantAble: "ReadyForNewScale", wantLimit: "ScaleUpLimit"},
		{name: "scale up disabled", up: rules(0, off, pods(4, 60)), down: defDown, current: 10, desired: 50, minReplicas: 1, maxReplicas: 100, want: 10, wantAble: "ReadyForNewScale", wantLimit: "ScaleUpLimit"},
		// 4 pods were added 30 s ago: the period started at 6, so 6+4.
		{name: "pods policy counts the period's events", up: rules(0, max, pods(4, 60)), down: defDown, current: 10, desired: 50, minReplicas: 1, maxReplicas: 100, events: []event{{4, 30 * time.Second}}, want: 10, wantAble: "ReadyForNewScale", wantLimit: "ScaleUpLimit"},
		{name: "events before the period do not count", up: rules(0, max, pods(4, 60)), down: defDown, current: 10, desired: 50, minReplicas: 1, maxReplicas: 100, events: []event{{4, 90 * time.Second}}, want: 14, wantAble: "ReadyForNewScale", wantLimit: "ScaleUpLimit"},
		{name: "percent down", up: defUp, down: rules(0, max, percent(50, 60)), current: 10, desired: 1, minReplicas: 1, maxReplicas: 100, want: 5, wantAble: "ReadyForNewScale", wantLimit: "ScaleDownLimit"},
		{name: "selectPolicy Max down takes the larger change", up: defUp, down: rules(0, max, percent(50, 60), pods(2, 60)), current: 10, desired: 1, minReplicas: 1, maxReplicas: 100, want: 5, wantAble: "ReadyForNewScale", wantLimit: "ScaleDownLimit"},
		{name: "selectPolicy Min down takes the smaller", up: defUp, down: rules(0, min, percent(50, 60), pods(2, 60)), current: 10, desired: 1, minReplicas: 1, maxReplicas: 100, want: 8, wantAble: "ReadyForNewScale", wantLimit: "ScaleDownLimit"},
		{name: "scale down disabled", up: defUp, down: rules(0, off, percent(50, 60)), current: 10, desired: 1, minReplicas: 1, maxReplicas: 100, want: 10, wantAble: "ReadyForNewScale", wantLimit: "ScaleDownLimit"},
		{name: "min replicas", up: defUp, down: rules(0, max, percent(100, 15)), current: 10, desired: 1, minReplicas: 3, maxReplicas: 100, want: 3, wantAble: "ReadyForNewScale", wantLimit: "TooFewReplicas"},
		// The down window holds the highest recent recommendation (8),
		// capped at the current count.
		{name: "scale down stabilized", up: defUp, down: rules(60, max, percent(100, 15)), current: 6, desired: 2, minReplicas: 1, maxReplicas: 100, recommendations: []event{{5, 10 * time.Second}, {8, 20 * time.Second}}, want: 6, wantAble: "ScaleDownStabilized", wantLimit: "DesiredWithinRange"},
		{name: "scale down to the highest of the window", up: defUp, down: rules(60, max, percent(100, 15)), current: 6, desired: 2, minReplicas: 1, maxReplicas: 100, recommendations: []event{{4, 10 * time.Second}, {3, 20 * time.Second}, {9, 2 * time.Minute}}, want: 4, wantAble: "ScaleDownStabilized", wantLimit: "DesiredWithinRange"},
		// The up window holds the lowest.
		{name: "scale up stabilized", up: rules(60, max, percent(100, 15)), down: defDown, current: 4, desired: 8, minReplicas: 1, maxReplicas: 100, recommendations: []event{{5, 10 * time.Second}, {7, 20 * time.Second}}, want: 5, wantAble: "ScaleUpStabilized", wantLimit: "DesiredWithinRange"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := &history{}
			for _, r := range tc.recommendations {
				hs.recommendations = append(hs.recommendations, timestampedRecommendation{r.change, calcNow.Add(-r.ago)})
			}
			for _, e := range tc.events {
				if e.change > 0 {
					hs.scaleUpEvents = append(hs.scaleUpEvents, timestampedScaleEvent{replicaChange: e.change, timestamp: calcNow.Add(-e.ago)})
				} else {
					hs.scaleDownEvents = append(hs.scaleDownEvents, timestampedScaleEvent{replicaChange: -e.change, timestamp: calcNow.Add(-e.ago)})
				}
			}
			n := hs.normalizeWithBehavior(calcNow, &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: tc.up, ScaleDown: tc.down}, tc.current, tc.desired, tc.minReplicas, tc.maxReplicas)
			if n.replicas != tc.want || n.ableReason != tc.wantAble || n.limitReason != tc.wantLimit {
				t.Fatalf("got %d (%s, %s), want %d (%s, %s)", n.replicas, n.ableReason, n.limitReason, tc.want, tc.wantAble, tc.wantLimit)
			}
			if n.limited != (tc.wantLimit != "DesiredWithinRange") {
				t.Fatalf("limited %v with reason %s", n.limited, n.limitReason)
			}
			if last := hs.recommendations[len(hs.recommendations)-1]; last.recommendation != tc.desired && len(tc.recommendations) == 0 {
				t.Fatalf("recommendation %d not recorded: %+v", tc.desired, hs.recommendations)
			}
		})
	}
}

// Without behavior: the highest recommendation of the downscale window,
// then min/max and the 2x-or-4 scale-up limit.
func TestNormalizeWithoutBehavior(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		current, desired         int32
		minReplicas, maxReplicas int32
		recommendations          []event
		want                     int32
		wantAble, wantLimit      string
	}{
		{name: "up to twice", current: 3, desired: 10, minReplicas: 1, maxReplicas: 20, want: 6, wantAble: "ReadyForNewScale", wantLimit: "ScaleUpLimit"},
		{name: "up to 4", current: 1, desired: 10, minReplicas: 1, maxReplicas: 20, want: 4, wantAble: "ReadyForNewScale", wantLimit: "ScaleUpLimit"},
		{name: "max", current: 3, desired: 10, minReplicas: 1, maxReplicas: 5, want: 5, wantAble: "ReadyForNewScale", wantLimit: "TooManyReplicas"},
		{name: "min", current: 3, desired: 1, minReplicas: 2, maxReplicas: 5, want: 2, wantAble: "ReadyForNewScale", wantLimit: "TooFewReplicas"},
		{name: "stabilized", current: 5, desired: 1, minReplicas: 1, maxReplicas: 5, recommendations: []event{{5, time.Minute}, {3, 2 * time.Minute}}, want: 5, wantAble: "ScaleDownStabilized", wantLimit: "DesiredWithinRange"},
		{name: "old recommendations expire", current: 5, desired: 1, minReplicas: 1, maxReplicas: 5, recommendations: []event{{5, 6 * time.Minute}, {3, 2 * time.Minute}}, want: 3, wantAble: "ScaleDownStabilized", wantLimit: "DesiredWithinRange"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := &history{}
			for _, r := range tc.recommendations {
				hs.recommendations = append(hs.recommendations, timestampedRecommendation{r.change, calcNow.Add(-r.ago)})
			}
			n := hs.normalize(calcNow, DefaultDownscaleStabilization, tc.current, tc.desired, tc.minReplicas, tc.maxReplicas)
			if n.replicas != tc.want || n.ableReason != tc.wantAble || n.limitReason != tc.wantLimit {
				t.Fatalf("got %d (%s, %s), want %d (%s, %s)", n.replicas, n.ableReason, n.limitReason, tc.want, tc.wantAble, tc.wantLimit)
			}
		})
	}
}

// Scale events are kept per direction, an outdated one (older than the
// longest period) reused, and counted by the policies of their period.
func TestStoreScaleEvent(t *testing.T) {
	b := &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: rules(0, autoscalingv2.MaxChangePolicySelect, pods(2, 60)), ScaleDown: rules(0, autoscalingv2.MaxChangePolicySelect, pods(1, 60))}
	hs := &history{}
	hs.storeScaleEvent(calcNow.Add(-2*time.Minute), b, 2, 4)
	hs.storeScaleEvent(calcNow.Add(-30*time.Second), b, 4, 6)
	hs.storeScaleEvent(calcNow, b, 6, 8) // reuses the 2-minute-old event
	if len(hs.scaleUpEvents) != 2 || len(hs.scaleDownEvents) != 0 {
		t.Fatalf("events up %+v down %+v", hs.scaleUpEvents, hs.scaleDownEvents)
	}
	if got := changeInPeriod(calcNow.Add(time.Second), 60, hs.scaleUpEvents); got != 4 {
		t.Fatalf("replicas added in the last minute: %d, want 4", got)
	}
	// 8 now, 4 added within the period: it started at 4, so 4+2.
	if got := scaleUpLimit(calcNow.Add(time.Second), 8, hs.scaleUpEvents, hs.scaleDownEvents, b.ScaleUp); got != 6 {
		t.Fatalf("scale-up limit %d, want 6", got)
	}
	hs.storeScaleEvent(calcNow, nil, 8, 2)
	if len(hs.scaleDownEvents) != 0 {
		t.Fatal("an HPA without behavior recorded a scale event")
	}
}
