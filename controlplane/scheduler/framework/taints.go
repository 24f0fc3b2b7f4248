package framework

import (
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
)

// TolerationsTolerateTaint reports whether any of tolerations tolerates
// taint (k8s.io/api's Toleration.ToleratesTaint, with the alpha Gt/Lt
// operators off, as kube-scheduler's default feature gates have them).
//
// The logger ToleratesTaint takes logs only values that the Gt and Lt
// operators fail to parse; with them off it never logs, so it gets a
// logger that discards.
func TolerationsTolerateTaint(tolerations []corev1.Toleration, taint *corev1.Taint) bool {
	log := logr.Discard()
	for i := range tolerations {
		if tolerations[i].ToleratesTaint(log, taint, false) {
			return true
		}
	}
	return false
}

// FindUntoleratedTaint returns the first taint with one of effects (all
// effects when none are given) that tolerations do not tolerate.
func FindUntoleratedTaint(taints []corev1.Taint, tolerations []corev1.Toleration, effects ...corev1.TaintEffect) (corev1.Taint, bool) {
	for i := range taints {
		t := &taints[i]
		if len(effects) > 0 && !hasEffect(effects, t.Effect) {
			continue
		}
		if !TolerationsTolerateTaint(tolerations, t) {
			return *t, true
		}
	}
	return corev1.Taint{}, false
}

func hasEffect(effects []corev1.TaintEffect, e corev1.TaintEffect) bool {
	for _, x := range effects {
		if x == e {
			return true
		}
	}
	return false
}
