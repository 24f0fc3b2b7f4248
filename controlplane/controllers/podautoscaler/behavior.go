package podautoscaler

import (
	"math"
	"sync"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
)

// Without spec.behavior, a scale-up goes at most to the larger of twice
// the current replicas and 4 per sync, as Kubernetes' calculateScaleUpLimit.
const (
	scaleUpLimitFactor  = 2.0
	scaleUpLimitMinimum = 4.0
)

type timestampedRecommendation struct {
	recommendation int32
	timestamp      time.Time
}

type timestampedScaleEvent struct {
	replicaChange int32 // always positive: the replicas added, or removed
	timestamp     time.Time
	outdated      bool
}

// history is what the controller remembers of one HPA between syncs, in
// memory only as Kubernetes' HorizontalController (a restart starts it
// empty): the recent unstabilized recommendations and the recent scale
// events the behavior's policies count.
type history struct {
	recommendations []timestampedRecommendation
	scaleUpEvents   []timestampedScaleEvent
	scaleDownEvents []timestampedScaleEvent
}

// histories holds the history of every HPA by "namespace/name".
type histories struct {
	mu sync.Mutex
	m  map[string]*history // mu guards
}

// get returns key's history, creating it with the initial recommendation
// currentReplicas (Kubernetes' recordInitialRecommendation).
func (h *histories) get(key string, currentReplicas int32, now time.Time) *history {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]*history{}
	}
	hs := h.m[key]
	if hs == nil {
		hs = &history{recommendations: []timestampedRecommendation{{currentReplicas, now}}}
		h.m[key] = hs
	}
	return hs
}

func (h *histories) forget(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, key)
}

// normalization is a normalizer's outcome: the replica count to set and
// the reasons and messages of the AbleToScale and ScalingLimited
// conditions.
type normalization struct {
	replicas                  int32
	ableReason, ableMessage   string
	limited                   bool
	limitReason, limitMessage string
}

// normalize applies stabilization within downscaleWindow and the basic
// limits (minReplicas, maxReplicas, the 2x/4 scale-up limit) to desired,
// as Kubernetes' normalizeDesiredReplicas for an HPA without behavior.
// The history must not be used concurrently (the workqueue syncs one key
// at a time).
func (hs *history) normalize(now time.Time, downscaleWindow time.Duration, current, desired, minReplicas, maxReplicas int32) normalization {
	stabilized := hs.stabilize(now, downscaleWindow, desired)
	n := normalization{ableReason: "ReadyForNewScale", ableMessage: "recommended size matches current size"}
	if stabilized != desired {
		n.ableReason, n.ableMessage = "ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest recent recommendation"
	}
	n.replicas, n.limitReason, n.limitMessage = convertDesiredReplicasWithRules(current, stabilized, minReplicas, maxReplicas)
	n.limited = n.replicas != stabilized
	return n
}

// stabilize records desired and returns the highest recommendation of the
// window, as Kubernetes' stabilizeRecommendation (a sample older than the
// window is reused for the new one).
func (hs *history) stabilize(now time.Time, window time.Duration, desired int32) int32 {
	highest := desired
	old := -1
	cutoff := now.Add(-window)
	for i, rec := range hs.recommendations {
		if rec.timestamp.Before(cutoff) {
			old = i
		} else if rec.recommendation > highest {
			highest = rec.recommendation
		}
	}
	hs.record(old, desired, now)
	return highest
}

func (hs *history) record(old int, desired int32, now time.Time) {
	if old >= 0 {
		hs.recommendations[old] = timestampedRecommendation{desired, now}
	} else {
		hs.recommendations = append(hs.recommendations, timestampedRecommendation{desired, now})
	}
}

// convertDesiredReplicasWithRules clamps desired to [minReplicas,
// min(maxReplicas, scale-up limit)] with the ScalingLimited reason, as
// Kubernetes' function of that name.
func convertDesiredReplicasWithRules(current, desired, minReplicas, maxReplicas int32) (int32, string, string) {
	maxAllowed := maxReplicas
	reason, message := "TooManyReplicas", "the desired replica count is more than the maximum replica count"
	if limit := int32(math.Max(scaleUpLimitFactor*float64(current), scaleUpLimitMinimum)); maxReplicas > limit {
		maxAllowed = limit
		reason, message = "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate"
	}
	switch {
	case desired < minReplicas:
		return minReplicas, "TooFewReplicas", "the desired replica count is less than the minimum replica count"
	case desired > maxAllowed:
		return maxAllowed, reason, message
	}
	return desired, "DesiredWithinRange", "the desired count is within the acceptable range"
}

// normalizeWithBehavior applies behavior (its scale-up and scale-down
// rules, defaulted) to desired, as Kubernetes'
// normalizeDesiredReplicasWithBehaviors: stabilization within each
// direction's window, then the policies' rate over their periods and the
// min/max clamps.
func (hs *history) normalizeWithBehavior(now time.Time, behavior *autoscalingv2.HorizontalPodAutoscalerBehavior, current, desired, minReplicas, maxReplicas int32) normalization {
	up, down := behavior.ScaleUp, behavior.ScaleDown
	stabilized, reason, message := hs.stabilizeWithBehavior(now, up, down, current, desired)
	n := normalization{ableReason: "ReadyForNewScale", ableMessage: "recommended size matches current size"}
	if stabilized != desired {
		n.ableReason, n.ableMessage = reason, message
	}
	n.replicas, n.limitReason, n.limitMessage = hs.convertWithBehaviorRate(now, up, down, current, stabilized, minReplicas, maxReplicas)
	n.limited = n.replicas != stabilized
	return n
}

// stabilizeWithBehavior records desired and brings the current count
// within [lowest recommendation of the scale-up window, highest of the
// scale-down window], as Kubernetes' stabilizeRecommendationWithBehaviors.
func (hs *history) stabilizeWithBehavior(now time.Time, up, down *autoscalingv2.HPAScalingRules, current, desired int32) (int32, string, string) {
	upCutoff := now.Add(-seconds(up.StabilizationWindowSeconds))
	downCutoff := now.Add(-seconds(down.StabilizationWindowSeconds))
	upRec, downRec := desired, desired
	old := -1
	for i, rec := range hs.recommendations {
		if rec.timestamp.After(upCutoff) {
			upRec = min(upRec, rec.recommendation)
		}
		if rec.timestamp.After(downCutoff) {
			downRec = max(downRec, rec.recommendation)
		}
		if rec.timestamp.Before(upCutoff) && rec.timestamp.Before(downCutoff) {
			old = i
		}
	}
	recommendation := max(current, upRec)
	recommendation = min(recommendation, downRec)
	hs.record(old, desired, now)
	if desired >= current {
		return recommendation, "ScaleUpStabilized", "recent recommendations were lower than current one, applying the lowest recent recommendation"
	}
	return recommendation, "ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest recent recommendation"
}

// convertWithBehaviorRate limits desired by the policies' rate and the
// min/max clamps, as Kubernetes' convertDesiredReplicasWithBehaviorRate.
func (hs *history) convertWithBehaviorRate(now time.Time, up, down *autoscalingv2.HPAScalingRules, current, desired, minReplicas, maxReplicas int32) (int32, string, string) {
	switch {
	case desired > current:
		limit := max(current, scaleUpLimit(now, current, hs.scaleUpEvents, hs.scaleDownEvents, up))
		maxAllowed := maxReplicas
		reason, message := "TooManyReplicas", "the desired replica count is more than the maximum replica count"
		if maxAllowed > limit {
			maxAllowed = limit
			reason, message = "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate"
		}
		if desired > maxAllowed {
			return maxAllowed, reason, message
		}
	case desired < current:
		limit := min(current, scaleDownLimit(now, current, hs.scaleUpEvents, hs.scaleDownEvents, down))
		minAllowed := minReplicas
		reason, message := "TooFewReplicas", "the desired replica count is less than the minimum replica count"
		if minAllowed < limit {
			minAllowed = limit
			reason, message = "ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate"
		}
		if desired < minAllowed {
			return minAllowed, reason, message
		}
	}
	return desired, "DesiredWithinRange", "the desired count is within the acceptable range"
}

// scaleUpLimit is the most replicas rules allow now, as Kubernetes'
// calculateScaleUpLimitWithScalingRules: each policy allows its Value
// (Pods) or Value percent more (Percent, rounded up) than the count at
// the start of its period; selectPolicy Max takes the largest, Min the
// smallest, Disabled allows no change.
func scaleUpLimit(now time.Time, current int32, upEvents, downEvents []timestampedScaleEvent, rules *autoscalingv2.HPAScalingRules) int32 {
	sel := selectPolicy(rules)
	if sel == autoscalingv2.DisabledPolicySelect {
		return current
	}
	var result int32 = math.MinInt32
	pick := maxInt32
	if sel == autoscalingv2.MinChangePolicySelect {
		result, pick = math.MaxInt32, minInt32
	}
	for _, p := range rules.Policies {
		start := current - changeInPeriod(now, p.PeriodSeconds, upEvents) + changeInPeriod(now, p.PeriodSeconds, downEvents)
		var proposed int32
		switch p.Type {
		case autoscalingv2.PodsScalingPolicy:
			proposed = start + p.Value
		case autoscalingv2.PercentScalingPolicy:
			proposed = int32(math.Ceil(float64(start) * (1 + float64(p.Value)/100)))
		}
		result = pick(result, proposed)
	}
	return result
}

// scaleDownLimit is the fewest replicas rules allow now, as Kubernetes'
// calculateScaleDownLimitWithBehaviors: each policy allows Value (Pods)
// or Value percent (Percent, rounded down) fewer than the count at the
// start of its period; selectPolicy Max takes the largest change, Min
// the smallest, Disabled allows none.
func scaleDownLimit(now time.Time, current int32, upEvents, downEvents []timestampedScaleEvent, rules *autoscalingv2.HPAScalingRules) int32 {
	sel := selectPolicy(rules)
	if sel == autoscalingv2.DisabledPolicySelect {
		return current
	}
	var result int32 = math.MaxInt32
	pick := minInt32
	if sel == autoscalingv2.MinChangePolicySelect {
		result, pick = math.MinInt32, maxInt32
	}
	for _, p := range rules.Policies {
		start := current + changeInPeriod(now, p.PeriodSeconds, downEvents) - changeInPeriod(now, p.PeriodSeconds, upEvents)
		var proposed int32
		switch p.Type {
		case autoscalingv2.PodsScalingPolicy:
			proposed = start - p.Value
		case autoscalingv2.PercentScalingPolicy:
			proposed = int32(float64(start) * (1 - float64(p.Value)/100))
		}
		result = pick(result, proposed)
	}
	return result
}

func selectPolicy(rules *autoscalingv2.HPAScalingRules) autoscalingv2.ScalingPolicySelect {
	if rules.SelectPolicy == nil {
		return autoscalingv2.MaxChangePolicySelect
	}
	return *rules.SelectPolicy
}

// changeInPeriod sums the replica changes of events within the last
// periodSeconds (Kubernetes' getReplicasChangePerPeriod).
func changeInPeriod(now time.Time, periodSeconds int32, events []timestampedScaleEvent) int32 {
	cutoff := now.Add(-time.Duration(periodSeconds) * time.Second)
	var n int32
	for _, e := range events {
		if e.timestamp.After(cutoff) {
			n += e.replicaChange
		}
	}
	return n
}

// storeScaleEvent records a rescale from prev to next for the policies,
// reusing an event older than the direction's longest period, as
// Kubernetes' storeScaleEvent. Without behavior nothing is recorded.
func (hs *history) storeScaleEvent(now time.Time, behavior *autoscalingv2.HorizontalPodAutoscalerBehavior, prev, next int32) {
	if behavior == nil {
		return
	}
	events, rules, change := &hs.scaleDownEvents, behavior.ScaleDown, prev-next
	if next > prev {
		events, rules, change = &hs.scaleUpEvents, behavior.ScaleUp, next-prev
	}
	var longest int32
	for _, p := range rules.Policies {
		longest = max(longest, p.PeriodSeconds)
	}
	cutoff := now.Add(-time.Duration(longest) * time.Second)
	old := -1
	for i := range *events {
		if (*events)[i].timestamp.Before(cutoff) {
			(*events)[i].outdated = true
		}
		if (*events)[i].outdated {
			old = i
		}
	}
	e := timestampedScaleEvent{replicaChange: change, timestamp: now}
	if old >= 0 {
		(*events)[old] = e
	} else {
		*events = append(*events, e)
	}
}

func seconds(s *int32) time.Duration {
	if s == nil {
		return 0
	}
	return time.Duration(*s) * time.Second
}

func minInt32(a, b int32) int32 { return min(a, b) }
func maxInt32(a, b int32) int32 { return max(a, b) }
