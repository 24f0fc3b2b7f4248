package apiserver

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/store"
)

// nameFunc returns the name rule Kubernetes applies to a kind: DNS-1123
// labels for namespaces, DNS-1035 labels for services, DNS-1123 subdomains
// for the rest.
func nameFunc(kind string) apivalidation.ValidateNameFunc {
	switch kind {
	case "Namespace":
		return apivalidation.NameIsDNSLabel
	case "Service":
		return apivalidation.NameIsDNS1035Label
	default:
		return apivalidation.NameIsDNSSubdomain
	}
}

// maxValidationErrors bounds the field errors one answer lists: the
// message of an Invalid Status joins them all (quadratically, in
// apimachinery's aggregate), so a body that is wrong in every one of
// thousands of places would otherwise cost minutes of CPU.
const maxValidationErrors = 100

// invalid is the 422 Invalid Status for errs on the object kind/name,
// listing at most maxValidationErrors of them and the count of the rest.
func invalid(r store.Resource, name string, errs field.ErrorList) error {
	if n := len(errs); n > maxValidationErrors {
		errs = append(errs[:maxValidationErrors:maxValidationErrors],
			&field.Error{Type: field.ErrorTypeTooMany, Field: "<object>", BadValue: n, Detail: fmt.Sprintf("%d more errors are not listed", n-maxValidationErrors)})
	}
	return apierrors.NewInvalid(r.GroupVersion().WithKind(r.Kind).GroupKind(), name, errs)
}

// validateCreate validates metadata (name, labels, annotations, owner
// references, finalizers: apimachinery's ValidateObjectMeta) and the
// fields orca relies on per kind.
func validateCreate(r store.Resource, obj store.Object) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaAccessor(obj, r.Namespaced, nameFunc(r.Kind), field.NewPath("metadata"))
	return append(errs, validateKind(obj)...)
}

// validateUpdate is validateCreate plus the immutability rules of an
// update (ValidateObjectMetaAccessorUpdate and the kind's own).
func validateUpdate(r store.Resource, sub string, obj, old store.Object) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaAccessorUpdate(obj, old, field.NewPath("metadata"))
	errs = append(errs, validateCreate(r, obj)...)
	switch o := obj.(type) {
	case *corev1.Pod:
		errs = append(errs, validatePodUpdate(o, old.(*corev1.Pod))...)
		errs = append(errs, validatePodStatus(&o.Status, field.NewPath("status"))...)
	case *appsv1.Deployment:
		errs = append(errs, apivalidation.ValidateImmutableField(o.Spec.Selector, old.(*appsv1.Deployment).Spec.Selector, field.NewPath("spec", "selector"))...)
	case *appsv1.ReplicaSet:
		errs = append(errs, apivalidation.ValidateImmutableField(o.Spec.Selector, old.(*appsv1.ReplicaSet).Spec.Selector, field.NewPath("spec", "selector"))...)
	case *corev1.Service:
		os := old.(*corev1.Service)
		if os.Spec.ClusterIP != "" && o.Spec.ClusterIP != os.Spec.ClusterIP && o.Spec.Type != corev1.ServiceTypeExternalName {
			errs = append(errs, field.Invalid(field.NewPath("spec", "clusterIP"), o.Spec.ClusterIP, "field is immutable"))
		}
	case *corev1.Secret:
		errs = append(errs, validateSecretUpdate(o, old.(*corev1.Secret))...)
	case *nodev1.RuntimeClass:
		errs = append(errs, apivalidation.ValidateImmutableField(o.Handler, old.(*nodev1.RuntimeClass).Handler, field.NewPath("handler"))...)
	}
	return errs
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

// validateKind validates the kind-specific fields of obj.
func validateKind(obj store.Object) field.ErrorList {
	switch o := obj.(type) {
	case *corev1.Pod:
		return validatePodSpec(&o.Spec, field.NewPath("spec"))
	case *appsv1.Deployment:
		errs := validateWorkload(o.Spec.Replicas, o.Spec.Selector, &o.Spec.Template, field.NewPath("spec"))
		return append(errs, validateDeploymentStrategy(&o.Spec.Strategy, field.NewPath("spec", "strategy"))...)
	case *appsv1.ReplicaSet:
		return validateWorkload(o.Spec.Replicas, o.Spec.Selector, &o.Spec.Template, field.NewPath("spec"))
	case *corev1.Service:
		return validateService(o)
	case *nodev1.RuntimeClass:
		var errs field.ErrorList
		for _, msg := range validation.IsDNS1123Label(o.Handler) {
			errs = append(errs, field.Invalid(field.NewPath("handler"), o.Handler, msg))
		}
		if o.Overhead != nil {
			errs = append(errs, validateResourceList(o.Overhead.PodFixed, field.NewPath("overhead", "podFixed"))...)
		}
		return errs
	case *corev1.Node:
		errs := validateQuantities(o.Status.Capacity, field.NewPath("status", "capacity"))
		return append(errs, validateQuantities(o.Status.Allocatable, field.NewPath("status", "allocatable"))...)
	case *corev1.Secret:
		return validateSecret(o)
	case *corev1.ConfigMap:
		var errs field.ErrorList
		for k := range o.Data {
			for _, msg := range validation.IsConfigMapKey(k) {
				errs = append(errs, field.Invalid(field.NewPath("data").Key(k), k, msg))
			}
		}
		return errs
	}
	return nil
}

var (
	restartPolicies = sets.New(string(corev1.RestartPolicyAlways), string(corev1.RestartPolicyOnFailure), string(corev1.RestartPolicyNever))
	dnsPolicies     = sets.New(string(corev1.DNSClusterFirst), string(corev1.DNSClusterFirstWithHostNet), string(corev1.DNSDefault), string(corev1.DNSNone))
	protocols       = sets.New(string(corev1.ProtocolTCP), string(corev1.ProtocolUDP), string(corev1.ProtocolSCTP))
	serviceTypes    = sets.New(string(corev1.ServiceTypeClusterIP), string(corev1.ServiceTypeNodePort), string(corev1.ServiceTypeLoadBalancer), string(corev1.ServiceTypeExternalName))
)

// validatePodSpec checks the parts of a pod spec orca uses: containers
// (non-empty, unique DNS-1123 label names, an image, valid ports), restart
// and DNS policy, grace period, runtime class name.
func validatePodSpec(sp *corev1.PodSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(sp.Containers) == 0 {
		errs = append(errs, field.Required(p.Child("containers"), "must have at least one container"))
	}
	names := sets.New[string]()
	check := func(cs []corev1.Container, cp *field.Path) {
		for i, c := range cs {
			idx := cp.Index(i)
			if c.Name == "" {
				errs = append(errs, field.Required(idx.Child("name"), ""))
			} else {
				for _, msg := range validation.IsDNS1123Label(c.Name) {
					errs = append(errs, field.Invalid(idx.Child("name"), c.Name, msg))
				}
				if names.Has(c.Name) {
					errs = append(errs, field.Duplicate(idx.Child("name"), c.Name))
				}
				names.Insert(c.Name)
			}
			if c.Image == "" {
				errs = append(errs, field.Required(idx.Child("image"), ""))
			} else if strings.TrimSpace(c.Image) != c.Image {
				errs = append(errs, field.Invalid(idx.Child("image"), c.Image, "must not have leading or trailing whitespace"))
			}
			errs = append(errs, validateResources(&c.Resources, idx.Child("resources"))...)
			errs = append(errs, validateProbe(c.LivenessProbe, idx.Child("livenessProbe"))...)
			errs = append(errs, validateProbe(c.ReadinessProbe, idx.Child("readinessProbe"))...)
			errs = append(errs, validateProbe(c.StartupProbe, idx.Child("startupProbe"))...)
			for j, port := range c.Ports {
				pp := idx.Child("ports").Index(j)
				for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
					errs = append(errs, field.Invalid(pp.Child("containerPort"), port.ContainerPort, msg))
				}
				if port.HostPort != 0 {
					for _, msg := range validation.IsValidPortNum(int(port.HostPort)) {
						errs = append(errs, field.Invalid(pp.Child("hostPort"), port.HostPort, msg))
					}
				}
				if port.Name != "" {
					for _, msg := range validation.IsValidPortName(port.Name) {
						errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
					}
				}
				if port.Protocol != "" && !protocols.Has(string(port.Protocol)) {
					errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, sets.List(protocols)))
				}
			}
		}
	}
	check(sp.InitContainers, p.Child("initContainers"))
	check(sp.Containers, p.Child("containers"))
	for i, ec := range sp.EphemeralContainers {
		errs = append(errs, validateResources(&ec.Resources, p.Child("ephemeralContainers").Index(i).Child("resources"))...)
	}
	errs = append(errs, validateResourceList(sp.Overhead, p.Child("overhead"))...)
	if sp.Resources != nil {
		errs = append(errs, validateResources(sp.Resources, p.Child("resources"))...)
	}
	if sp.RestartPolicy != "" && !restartPolicies.Has(string(sp.RestartPolicy)) {
		errs = append(errs, field.NotSupported(p.Child("restartPolicy"), sp.RestartPolicy, sets.List(restartPolicies)))
	}
	if sp.DNSPolicy != "" && !dnsPolicies.Has(string(sp.DNSPolicy)) {
		errs = append(errs, field.NotSupported(p.Child("dnsPolicy"), sp.DNSPolicy, sets.List(dnsPolicies)))
	}
	if g := sp.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		errs = append(errs, field.Invalid(p.Child("terminationGracePeriodSeconds"), *g, "must be greater than or equal to 0"))
	}
	if a := sp.ActiveDeadlineSeconds; a != nil && *a <= 0 {
		errs = append(errs, field.Invalid(p.Child("activeDeadlineSeconds"), *a, "must be greater than 0"))
	}
	if rc := sp.RuntimeClassName; rc != nil {
		for _, msg := range validation.IsDNS1123Subdomain(*rc) {
			errs = append(errs, field.Invalid(p.Child("runtimeClassName"), *rc, msg))
		}
	}
	if sp.Hostname != "" {
		for _, msg := range validation.IsDNS1123Label(sp.Hostname) {
			errs = append(errs, field.Invalid(p.Child("hostname"), sp.Hostname, msg))
		}
	}
	if sp.Subdomain != "" {
		for _, msg := range validation.IsDNS1123Label(sp.Subdomain) {
			errs = append(errs, field.Invalid(p.Child("subdomain"), sp.Subdomain, msg))
		}
	}
	if sp.NodeName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(sp.NodeName) {
			errs = append(errs, field.Invalid(p.Child("nodeName"), sp.NodeName, msg))
		}
	}
	errs = append(errs, metav1validation.ValidateLabels(sp.NodeSelector, p.Child("nodeSelector"))...)
	errs = append(errs, validateVolumes(sp, p)...)
	return errs
}

// validateResources checks a container's resource limits and requests as
// Kubernetes' ValidateResourceRequirements: names are standard (cpu,
// memory, ephemeral-storage, hugepages-<size>) or domain-qualified,
// quantities are not negative, and a request is at most its limit; and,
// beyond Kubernetes, at most maxResourceQuantity, so that the scheduler's
// milli-unit arithmetic (Quantity.MilliValue) cannot wrap around.
func validateResources(rr *corev1.ResourceRequirements, p *field.Path) field.ErrorList {
	errs := validateResourceList(rr.Limits, p.Child("limits"))
	errs = append(errs, validateResourceList(rr.Requests, p.Child("requests"))...)
	for name, req := range rr.Requests {
		if lim, ok := rr.Limits[name]; ok && req.Cmp(lim) > 0 {
			errs = append(errs, field.Invalid(p.Child("requests").Key(string(name)), req.String(),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, lim.String())))
		}
	}
	return errs
}

// validateProbe checks a probe's timings as Kubernetes' validateProbe:
// none negative, and terminationGracePeriodSeconds, when set, positive.
func validateProbe(pr *corev1.Probe, p *field.Path) field.ErrorList {
	if pr == nil {
		return nil
	}
	var errs field.ErrorList
	for _, f := range []struct {
		name string
		v    int32
	}{{"initialDelaySeconds", pr.InitialDelaySeconds}, {"timeoutSeconds", pr.TimeoutSeconds}, {"periodSeconds", pr.PeriodSeconds},
		{"successThreshold", pr.SuccessThreshold}, {"failureThreshold", pr.FailureThreshold}} {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(f.v), p.Child(f.name))...)
	}
	if g := pr.TerminationGracePeriodSeconds; g != nil && *g <= 0 {
		errs = append(errs, field.Invalid(p.Child("terminationGracePeriodSeconds"), *g, "must be greater than 0"))
	}
	return errs
}

// maxResourceQuantity is the largest resource quantity orca accepts:
// 2^63-1 milli-units, the range of Quantity.MilliValue.
var maxResourceQuantity = resource.NewMilliQuantity(math.MaxInt64, resource.DecimalSI)

// validateResourceList checks the names and quantities of a resource list
// (limits, requests, pod overhead): standard or
// domain-qualified names, 0 <= quantity <= maxResourceQuantity.
func validateResourceList(list corev1.ResourceList, lp *field.Path) field.ErrorList {
	var errs field.ErrorList
	for name := range list {
		kp := lp.Key(string(name))
		if !standardContainerResources.Has(string(name)) && !strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
			if !strings.Contains(string(name), "/") {
				errs = append(errs, field.Invalid(kp, name, "must be a standard resource type or fully qualified"))
			} else {
				for _, msg := range validation.IsQualifiedName(string(name)) {
					errs = append(errs, field.Invalid(kp, name, msg))
				}
			}
		}
	}
	return append(errs, validateQuantities(list, lp)...)
}

// validateQuantities checks 0 <= quantity <= maxResourceQuantity for every
// entry of a resource list, whatever its names (node capacity has "pods").
func validateQuantities(list corev1.ResourceList, lp *field.Path) field.ErrorList {
	var errs field.ErrorList
	for name, q := range list {
		kp := lp.Key(string(name))
		switch {
		case q.Sign() < 0:
			errs = append(errs, field.Invalid(kp, q.String(), "must be greater than or equal to 0"))
		case q.Cmp(*maxResourceQuantity) > 0:
			errs = append(errs, field.Invalid(kp, q.String(), "must be less than or equal to "+maxResourceQuantity.String()))
		}
	}
	return errs
}

var standardContainerResources = sets.New(string(corev1.ResourceCPU), string(corev1.ResourceMemory), string(corev1.ResourceEphemeralStorage))

// validateWorkload checks a Deployment's or ReplicaSet's replicas,
// selector (required, non-empty, matching the template's labels) and
// template (labels, pod spec, restartPolicy Always), as apps validation.
func validateWorkload(replicas *int32, sel *metav1.LabelSelector, tpl *corev1.PodTemplateSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if replicas != nil && *replicas < 0 {
		errs = append(errs, field.Invalid(p.Child("replicas"), *replicas, "must be greater than or equal to 0"))
	}
	if sel == nil {
		errs = append(errs, field.Required(p.Child("selector"), ""))
	} else {
		errs = append(errs, metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
		if len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
			errs = append(errs, field.Invalid(p.Child("selector"), sel, "empty selector is invalid for deployment"))
		}
	}
	tp := p.Child("template")
	errs = append(errs, metav1validation.ValidateLabels(tpl.Labels, tp.Child("metadata", "labels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(tpl.Annotations, tp.Child("metadata", "annotations"))...)
	if sel != nil && len(errs) == 0 {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("selector"), sel, err.Error()))
		} else if !s.Matches(labels.Set(tpl.Labels)) {
			errs = append(errs, field.Invalid(tp.Child("metadata", "labels"), tpl.Labels, "`selector` does not match template `labels`"))
		}
	}
	errs = append(errs, validatePodSpec(&tpl.Spec, tp.Child("spec"))...)
	if tpl.Spec.RestartPolicy != "" && tpl.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(tp.Child("spec", "restartPolicy"), tpl.Spec.RestartPolicy, []string{string(corev1.RestartPolicyAlways)}))
	}
	return errs
}

// validateService checks type, ports (required unless headless or
// ExternalName; names unique and required when more than one; port,
// targetPort, protocol valid) and the selector's labels.
func validateService(svc *corev1.Service) field.ErrorList {
	p := field.NewPath("spec")
	sp := &svc.Spec
	var errs field.ErrorList
	if sp.Type != "" && !serviceTypes.Has(string(sp.Type)) {
		errs = append(errs, field.NotSupported(p.Child("type"), sp.Type, sets.List(serviceTypes)))
	}
	headless := sp.ClusterIP == corev1.ClusterIPNone
	if len(sp.Ports) == 0 && !headless && sp.Type != corev1.ServiceTypeExternalName {
		errs = append(errs, field.Required(p.Child("ports"), ""))
	}
	names := sets.New[string]()
	type portProto struct {
		port     int32
		protocol corev1.Protocol
	}
	seen := sets.New[portProto]()
	for i, port := range sp.Ports {
		pp := p.Child("ports").Index(i)
		// As Kubernetes' ValidateService: one port number per protocol.
		if key := (portProto{port.Port, port.Protocol}); seen.Has(key) {
			errs = append(errs, field.Duplicate(pp, fmt.Sprintf("%d/%s", port.Port, port.Protocol)))
		} else {
			seen.Insert(key)
		}
		if len(sp.Ports) > 1 && port.Name == "" {
			errs = append(errs, field.Required(pp.Child("name"), "must be specified when there is more than one port"))
		}
		if port.Name != "" {
			for _, msg := range validation.IsDNS1123Label(port.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
			}
			if names.Has(port.Name) {
				errs = append(errs, field.Duplicate(pp.Child("name"), port.Name))
			}
			names.Insert(port.Name)
		}
		for _, msg := range validation.IsValidPortNum(int(port.Port)) {
			errs = append(errs, field.Invalid(pp.Child("port"), port.Port, msg))
		}
		if port.Protocol != "" && !protocols.Has(string(port.Protocol)) {
			errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, sets.List(protocols)))
		}
		switch port.TargetPort.Type {
		case intstr.Int:
			if port.TargetPort.IntVal != 0 {
				for _, msg := range validation.IsValidPortNum(int(port.TargetPort.IntVal)) {
					errs = append(errs, field.Invalid(pp.Child("targetPort"), port.TargetPort.IntVal, msg))
				}
			}
		case intstr.String:
			for _, msg := range validation.IsValidPortName(port.TargetPort.StrVal) {
				errs = append(errs, field.Invalid(pp.Child("targetPort"), port.TargetPort.StrVal, msg))
			}
		}
		if port.NodePort != 0 && sp.Type != corev1.ServiceTypeNodePort && sp.Type != corev1.ServiceTypeLoadBalancer {
			errs = append(errs, field.Forbidden(pp.Child("nodePort"), fmt.Sprintf("may not be used when `type` is '%s'", sp.Type)))
		}
	}
	errs = append(errs, metav1validation.ValidateLabels(sp.Selector, p.Child("selector"))...)
	return errs
}

// validateDeploymentStrategy is Kubernetes' ValidateDeploymentStrategy and
// ValidateRollingUpdateDeployment: Recreate has no rollingUpdate; maxSurge
// and maxUnavailable are non-negative integers or percentages (maxUnavailable
// at most 100%), and not both zero, or a rollout could never progress.
func validateDeploymentStrategy(st *appsv1.DeploymentStrategy, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch st.Type {
	case appsv1.RecreateDeploymentStrategyType:
		if st.RollingUpdate != nil {
			errs = append(errs, field.Forbidden(p.Child("rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'"))
		}
		return errs
	case appsv1.RollingUpdateDeploymentStrategyType:
	default:
		return append(errs, field.NotSupported(p.Child("type"), st.Type, []string{string(appsv1.RecreateDeploymentStrategyType), string(appsv1.RollingUpdateDeploymentStrategyType)}))
	}
	ru := st.RollingUpdate
	if ru == nil {
		return errs
	}
	rp := p.Child("rollingUpdate")
	unavailable, uerrs := intOrPercent(ru.MaxUnavailable, rp.Child("maxUnavailable"), true)
	surge, serrs := intOrPercent(ru.MaxSurge, rp.Child("maxSurge"), false)
	errs = append(append(errs, uerrs...), serrs...)
	if len(uerrs) == 0 && len(serrs) == 0 && unavailable == 0 && surge == 0 {
		errs = append(errs, field.Invalid(rp.Child("maxUnavailable"), ru.MaxUnavailable.String(), "may not be 0 when `maxSurge` is 0"))
	}
	return errs
}

// intOrPercent checks an int-or-string that must be a non-negative integer
// or "<n>%" (at most 100% when capped), and returns its value (percentages
// as n): only whether it is zero matters to the caller.
func intOrPercent(v *intstr.IntOrString, p *field.Path, capped bool) (int, field.ErrorList) {
	if v == nil {
		return 1, nil
	}
	switch v.Type {
	case intstr.Int:
		if v.IntVal < 0 {
			return 0, field.ErrorList{field.Invalid(p, v.IntVal, "must be greater than or equal to 0")}
		}
		return int(v.IntVal), nil
	default:
		n, err := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%"))
		if !strings.HasSuffix(v.StrVal, "%") || err != nil || n < 0 {
			return 0, field.ErrorList{field.Invalid(p, v.StrVal, "must be an integer or percentage (e.g '5%')")}
		}
		if capped && n > 100 {
			return 0, field.ErrorList{field.Invalid(p, v.StrVal, "must not be greater than 100%")}
		}
		return n, nil
	}
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
