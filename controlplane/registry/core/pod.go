package core

import (
	"fmt"
	"net"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Pod is the pods kind, as Kubernetes' pkg/registry/core/pod/strategy.go:
// a pod starts Pending; its spec is fixed but for images, tolerations
// added, activeDeadlineSeconds lowered and the grace period; a bound pod
// is deleted gracefully (its node agent removes it); binding, eviction,
// log, exec, attach and portforward are served by the apiserver.
func Pod() registry.Kind {
	return registry.Kind{
		Resource:   store.Pods,
		Categories: []string{"all"},
		Status:     true,
		// Pods have a generation, bumped by spec changes, since
		// Kubernetes 1.33 (PodObservedGenerationTracking).
		Generation: true,
		Subresources: []registry.Subresource{
			{Name: "attach", Kind: "PodAttachOptions", Verbs: metav1.Verbs{"create", "get"}},
			{Name: "binding", Kind: "Binding", Verbs: metav1.Verbs{"create"}},
			// Group and version tell kubectl drain to evict (policy/v1).
			{Name: "eviction", Kind: "Eviction", Group: "policy", Version: "v1", Verbs: metav1.Verbs{"create"}},
			{Name: "exec", Kind: "PodExecOptions", Verbs: metav1.Verbs{"create", "get"}},
			{Name: "log", Verbs: metav1.Verbs{"get"}},
			{Name: "portforward", Kind: "PodPortForwardOptions", Verbs: metav1.Verbs{"create", "get"}},
			{Name: "proxy", Kind: "PodProxyOptions", Verbs: metav1.Verbs{"create", "delete", "get", "patch", "update"}},
		},
		Default: func(obj store.Object) { DefaultPodSpec(&obj.(*corev1.Pod).Spec) },
		PrepareForCreate: func(obj store.Object) {
			obj.(*corev1.Pod).Status = corev1.PodStatus{Phase: corev1.PodPending}
		},
		Validate: func(obj store.Object) field.ErrorList {
			return ValidatePodSpec(&obj.(*corev1.Pod).Spec, field.NewPath("spec"))
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			pod := obj.(*corev1.Pod)
			errs := validatePodUpdate(pod, old.(*corev1.Pod))
			return append(errs, validatePodStatus(&pod.Status, field.NewPath("status"))...)
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn,
			registry.Column("Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", 0),
			registry.Column("Status", "string", "The aggregate status of the containers in this pod.", 0),
			registry.Column("Restarts", "string", "The number of times the containers in this pod have been restarted.", 0),
			registry.AgeColumn,
			registry.Column("IP", "string", "IP address allocated to the pod.", 1),
			registry.Column("Node", "string", "Name of the node the pod is assigned to.", 1),
			registry.Column("Nominated Node", "string", "Name of the node nominated by the scheduler.", 1),
			registry.Column("Readiness Gates", "string", "The readiness gates of the pod.", 1)},
		Row: func(obj store.Object) []any {
			x := obj.(*corev1.Pod)
			ready, restarts := 0, int32(0)
			for _, cs := range x.Status.ContainerStatuses {
				if cs.Ready {
					ready++
				}
				restarts += cs.RestartCount
			}
			return []any{x.Name, fmt.Sprintf("%d/%d", ready, len(x.Spec.Containers)), podStatus(x), fmt.Sprint(restarts),
				registry.Age(obj), registry.OrNone(x.Status.PodIP), registry.OrNone(x.Spec.NodeName),
				registry.OrNone(x.Status.NominatedNodeName), readinessGates(x)}
		},
		Fields: func(obj store.Object) fields.Set {
			o := obj.(*corev1.Pod)
			return fields.Set{
				"spec.nodeName":            o.Spec.NodeName,
				"spec.restartPolicy":       string(o.Spec.RestartPolicy),
				"spec.schedulerName":       o.Spec.SchedulerName,
				"spec.serviceAccountName":  o.Spec.ServiceAccountName,
				"spec.hostNetwork":         fmt.Sprint(o.Spec.HostNetwork),
				"status.phase":             string(o.Status.Phase),
				"status.podIP":             o.Status.PodIP,
				"status.nominatedNodeName": o.Status.NominatedNodeName,
			}
		},
		GracePeriod:  podGracePeriod,
		NoDependents: true,
	}
}

// podGracePeriod is the pod strategy's CheckGracefulDelete: the requested
// grace, else spec.terminationGracePeriodSeconds (default 30 s); 0 for a
// pod not bound to a node or already finished, which no agent has to stop.
func podGracePeriod(obj store.Object, requested *int64) int64 {
	pod := obj.(*corev1.Pod)
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	if requested != nil {
		grace = *requested
	}
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		grace = 0
	}
	return grace
}

// podStatus is kubectl's STATUS column for a pod (simplified from
// printPod): the deletion, a waiting or terminated container's reason, or
// the phase.
func podStatus(p *corev1.Pod) string {
	reason := string(p.Status.Phase)
	if p.Status.Reason != "" {
		reason = p.Status.Reason
	}
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
			reason = cs.State.Waiting.Reason
		case cs.State.Terminated != nil && cs.State.Terminated.Reason != "":
			reason = cs.State.Terminated.Reason
		}
	}
	if p.DeletionTimestamp != nil {
		reason = "Terminating"
	}
	if reason == "" {
		reason = "Pending"
	}
	return reason
}

// validatePodUpdate enforces Kubernetes' pod update rule
// (ValidatePodUpdate): only container images, activeDeadlineSeconds,
// terminationGracePeriodSeconds and additional tolerations may change; the
// node name is set once (by pods/binding) and then fixed.
func validatePodUpdate(pod, old *corev1.Pod) field.ErrorList {
	specPath := field.NewPath("spec")
	var errs field.ErrorList
	if old.Spec.NodeName != "" && pod.Spec.NodeName != old.Spec.NodeName {
		errs = append(errs, field.Forbidden(specPath.Child("nodeName"), "may not be changed once set"))
	}
	// activeDeadlineSeconds may be set, or lowered, never removed or raised.
	if oa := old.Spec.ActiveDeadlineSeconds; oa != nil {
		if na := pod.Spec.ActiveDeadlineSeconds; na == nil || *na > *oa {
			errs = append(errs, field.Invalid(specPath.Child("activeDeadlineSeconds"), pod.Spec.ActiveDeadlineSeconds, "must be less than or equal to previous value"))
		}
	}
	munged := *pod.Spec.DeepCopy()
	if len(munged.Containers) == len(old.Spec.Containers) {
		for i := range munged.Containers {
			munged.Containers[i].Image = old.Spec.Containers[i].Image
			munged.Containers[i].ImagePullPolicy = old.Spec.Containers[i].ImagePullPolicy
		}
	}
	if len(munged.InitContainers) == len(old.Spec.InitContainers) {
		for i := range munged.InitContainers {
			munged.InitContainers[i].Image = old.Spec.InitContainers[i].Image
			munged.InitContainers[i].ImagePullPolicy = old.Spec.InitContainers[i].ImagePullPolicy
		}
	}
	munged.ActiveDeadlineSeconds = old.Spec.ActiveDeadlineSeconds
	munged.TerminationGracePeriodSeconds = old.Spec.TerminationGracePeriodSeconds
	if old.Spec.NodeName == "" {
		munged.NodeName = ""
	} else {
		munged.NodeName = old.Spec.NodeName
	}
	oldSpec := old.Spec.DeepCopy()
	oldSpec.NodeName = munged.NodeName
	// Tolerations may only be added to.
	if len(munged.Tolerations) >= len(oldSpec.Tolerations) && apiequality.Semantic.DeepEqual(munged.Tolerations[:len(oldSpec.Tolerations)], oldSpec.Tolerations) {
		munged.Tolerations = oldSpec.Tolerations
	}
	if !apiequality.Semantic.DeepEqual(&munged, oldSpec) {
		errs = append(errs, field.Forbidden(specPath, "pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations) or `spec.terminationGracePeriodSeconds`"))
	}
	return errs
}

var podPhases = sets.New("", string(corev1.PodPending), string(corev1.PodRunning), string(corev1.PodSucceeded), string(corev1.PodFailed), string(corev1.PodUnknown))

// validatePodStatus checks what a status write may carry, as Kubernetes'
// ValidatePodStatusUpdate: a known phase, IP addresses, condition statuses
// True/False/Unknown and non-negative restart counts.
func validatePodStatus(st *corev1.PodStatus, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !podPhases.Has(string(st.Phase)) {
		errs = append(errs, field.NotSupported(p.Child("phase"), st.Phase, sets.List(podPhases)[1:]))
	}
	ip := func(v string, fp *field.Path) {
		if v != "" && net.ParseIP(v) == nil {
			errs = append(errs, field.Invalid(fp, v, "must be a valid IP address"))
		}
	}
	ip(st.PodIP, p.Child("podIP"))
	ip(st.HostIP, p.Child("hostIP"))
	for i, a := range st.PodIPs {
		ip(a.IP, p.Child("podIPs").Index(i).Child("ip"))
	}
	for i, a := range st.HostIPs {
		ip(a.IP, p.Child("hostIPs").Index(i).Child("ip"))
	}
	for i, c := range st.Conditions {
		switch c.Status {
		case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
		default:
			errs = append(errs, field.NotSupported(p.Child("conditions").Index(i).Child("status"), c.Status, []string{"True", "False", "Unknown"}))
		}
	}
	for _, list := range []struct {
		name string
		sts  []corev1.ContainerStatus
	}{{"containerStatuses", st.ContainerStatuses}, {"initContainerStatuses", st.InitContainerStatuses}} {
		for i, cs := range list.sts {
			if cs.RestartCount < 0 {
				errs = append(errs, field.Invalid(p.Child(list.name).Index(i).Child("restartCount"), cs.RestartCount, "must be greater than or equal to 0"))
			}
		}
	}
	return errs
}

// readinessGates is the pod table's READINESS GATES cell, as kubectl's
// printPod: "<none>" without gates, else "<true>/<gates>".
func readinessGates(p *corev1.Pod) string {
	if len(p.Spec.ReadinessGates) == 0 {
		return "<none>"
	}
	ok := 0
	for _, g := range p.Spec.ReadinessGates {
		for _, c := range p.Status.Conditions {
			if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
				ok++
				break
			}
		}
	}
	return fmt.Sprintf("%d/%d", ok, len(p.Spec.ReadinessGates))
}
