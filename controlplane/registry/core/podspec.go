package core

import (
	"fmt"
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The pod spec rules shared by pods and the pod templates of workloads
// (apps): Kubernetes' pkg/apis/core/v1/defaults.go and
// pkg/apis/core/validation, for the fields orca's components read.

var (
	restartPolicies = sets.New(string(corev1.RestartPolicyAlways), string(corev1.RestartPolicyOnFailure), string(corev1.RestartPolicyNever))
	dnsPolicies     = sets.New(string(corev1.DNSClusterFirst), string(corev1.DNSClusterFirstWithHostNet), string(corev1.DNSDefault), string(corev1.DNSNone))
	protocols       = sets.New(string(corev1.ProtocolTCP), string(corev1.ProtocolUDP), string(corev1.ProtocolSCTP))
	serviceTypes    = sets.New(string(corev1.ServiceTypeClusterIP), string(corev1.ServiceTypeNodePort), string(corev1.ServiceTypeLoadBalancer), string(corev1.ServiceTypeExternalName))
)

// ValidatePodSpec checks the parts of a pod spec orca uses: containers
// (non-empty, unique DNS-1123 label names, an image, valid ports), restart
// and DNS policy, grace period, runtime class name.
func ValidatePodSpec(sp *corev1.PodSpec, p *field.Path) field.ErrorList {
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
	errs = append(errs, ValidateResourceList(sp.Overhead, p.Child("overhead"))...)
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
	errs := ValidateResourceList(rr.Limits, p.Child("limits"))
	errs = append(errs, ValidateResourceList(rr.Requests, p.Child("requests"))...)
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

// ValidateResourceList checks the names and quantities of a resource list
// (limits, requests, pod overhead): standard or
// domain-qualified names, 0 <= quantity <= maxResourceQuantity.
func ValidateResourceList(list corev1.ResourceList, lp *field.Path) field.ErrorList {
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
	return append(errs, ValidateQuantities(list, lp)...)
}

// ValidateQuantities checks 0 <= quantity <= maxResourceQuantity for every
// entry of a resource list, whatever its names (node capacity has "pods").
func ValidateQuantities(list corev1.ResourceList, lp *field.Path) field.ErrorList {
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

// DefaultPodSpec sets a pod spec's defaults as Kubernetes'
// SetDefaults_PodSpec and SetDefaults_Container: restartPolicy Always,
// dnsPolicy ClusterFirst, terminationGracePeriodSeconds 30, the default
// scheduler, an empty pod security context; per container the
// termination message path and policy, the image pull policy
// (defaultPullPolicy), TCP ports and probe defaults.
func DefaultPodSpec(sp *corev1.PodSpec) {
	if sp.RestartPolicy == "" {
		sp.RestartPolicy = corev1.RestartPolicyAlways
	}
	if sp.DNSPolicy == "" {
		sp.DNSPolicy = corev1.DNSClusterFirst
	}
	if sp.TerminationGracePeriodSeconds == nil {
		sp.TerminationGracePeriodSeconds = new(int64(corev1.DefaultTerminationGracePeriodSeconds))
	}
	if sp.SchedulerName == "" {
		sp.SchedulerName = corev1.DefaultSchedulerName
	}
	if sp.SecurityContext == nil {
		sp.SecurityContext = &corev1.PodSecurityContext{}
	}
	for i := range sp.InitContainers {
		defaultContainer(&sp.InitContainers[i])
	}
	for i := range sp.Containers {
		defaultContainer(&sp.Containers[i])
	}
}

func defaultContainer(c *corev1.Container) {
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	if c.ImagePullPolicy == "" && c.Image != "" {
		c.ImagePullPolicy = defaultPullPolicy(c.Image)
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
}

// defaultProbe sets a probe's defaults as Kubernetes' SetDefaults_Probe and
// SetDefaults_HTTPGetAction do: timeout 1 s, period 10 s, success
// threshold 1, failure threshold 3, HTTP scheme and path "/".
func defaultProbe(p *corev1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	if g := p.HTTPGet; g != nil {
		if g.Path == "" {
			g.Path = "/"
		}
		if g.Scheme == "" {
			g.Scheme = corev1.URISchemeHTTP
		}
	}
}

// defaultPullPolicy is Always for an image without a tag or tagged
// :latest, IfNotPresent otherwise (digest references included).
func defaultPullPolicy(image string) corev1.PullPolicy {
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	last := image[strings.LastIndex(image, "/")+1:]
	i := strings.LastIndex(last, ":")
	if i < 0 || last[i+1:] == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}
