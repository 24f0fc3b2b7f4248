package nodeagent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/runtimes"
)

// ConditionContainerRuntimeUnhealthy is the Node condition that says
// whether one of the node's runtimes is missing or failing, as
// node-problem-detector's condition of that name: True with reason
// ContainerRuntimeUnavailable and the reasons in its message, False with
// ContainerRuntimeIsHealthy.
const ConditionContainerRuntimeUnhealthy corev1.NodeConditionType = "ContainerRuntimeUnhealthy"

// checkRuntimes runs every runtime's health check (runtimes.HealthChecker)
// and reports whether the result differs from the previous one.
func (a *Agent) checkRuntimes(ctx context.Context) (changed bool) {
	now := map[string]string{}
	for _, rt := range a.cfg.Runtimes {
		hc, ok := rt.(runtimes.HealthChecker)
		if !ok {
			continue
		}
		if err := hc.Check(ctx); err != nil {
			now[rt.Handler()] = err.Error()
		}
	}
	a.healthMu.Lock()
	defer a.healthMu.Unlock()
	changed = !maps.Equal(now, a.unhealthy)
	if changed {
		for h, why := range now {
			if a.unhealthy[h] == "" {
				a.log.Warn("runtime unhealthy", "handler", h, "err", why)
			}
		}
		for h := range a.unhealthy {
			if now[h] == "" {
				a.log.Info("runtime healthy again", "handler", h)
			}
		}
	}
	a.unhealthy = now
	return changed
}

// runtimeCondition is the ContainerRuntimeUnhealthy condition for the
// missing and the failing runtimes.
func (a *Agent) runtimeCondition() corev1.NodeCondition {
	problems := map[string]string{}
	maps.Copy(problems, a.cfg.MissingRuntimes)
	a.healthMu.Lock()
	maps.Copy(problems, a.unhealthy)
	a.healthMu.Unlock()
	if len(problems) == 0 {
		return corev1.NodeCondition{Type: ConditionContainerRuntimeUnhealthy, Status: corev1.ConditionFalse,
			Reason: "ContainerRuntimeIsHealthy", Message: "runtimes " + strings.Join(a.handlers(), ", ") + " are functioning properly"}
	}
	var parts []string
	for _, h := range slices.Sorted(maps.Keys(problems)) {
		parts = append(parts, fmt.Sprintf("runtime handler %q: %s", h, problems[h]))
	}
	return corev1.NodeCondition{Type: ConditionContainerRuntimeUnhealthy, Status: corev1.ConditionTrue,
		Reason: "ContainerRuntimeUnavailable", Message: truncateMessage(strings.Join(parts, "; "))}
}

// reportMissingRuntimes logs each missing runtime and records a Warning
// Event on the Node (once per agent start).
func (a *Agent) reportMissingRuntimes(ctx context.Context) {
	if len(a.cfg.MissingRuntimes) == 0 {
		return
	}
	obj, err := a.api.Get(ctx, store.Nodes, "", a.cfg.NodeName)
	for _, h := range slices.Sorted(maps.Keys(a.cfg.MissingRuntimes)) {
		why := a.cfg.MissingRuntimes[h]
		a.log.Warn("runtime unavailable: pods of this handler are not scheduled on this node", "handler", h, "reason", why)
		if err == nil {
			a.recorder.Event(obj, "", corev1.EventTypeWarning, "ContainerRuntimeUnavailable",
				truncateMessage(fmt.Sprintf("runtime handler %q is not available, pods that need it are not scheduled here: %s", h, why)))
		}
	}
}
