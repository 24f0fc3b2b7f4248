package core

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	sessionAffinities       = sets.New(string(corev1.ServiceAffinityClientIP), string(corev1.ServiceAffinityNone))
	internalTrafficPolicies = sets.New(string(corev1.ServiceInternalTrafficPolicyCluster), string(corev1.ServiceInternalTrafficPolicyLocal))
	externalTrafficPolicies = sets.New(string(corev1.ServiceExternalTrafficPolicyCluster), string(corev1.ServiceExternalTrafficPolicyLocal))
	ipFamilies              = sets.New(string(corev1.IPv4Protocol), string(corev1.IPv6Protocol))
	ipFamilyPolicies        = sets.New(string(corev1.IPFamilyPolicySingleStack), string(corev1.IPFamilyPolicyPreferDualStack), string(corev1.IPFamilyPolicyRequireDualStack))
	trafficDistributions    = []string{corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone, corev1.ServiceTrafficDistributionPreferSameNode}
)

// MaxClientIPServiceAffinitySeconds is the longest
// sessionAffinityConfig.clientIP.timeoutSeconds (one day), as Kubernetes'.
const MaxClientIPServiceAffinitySeconds = 86400

// defaultService is SetDefaults_Service: type ClusterIP, clusterIPs from
// clusterIP when empty, sessionAffinity
// None (ClientIP gets timeoutSeconds 10800), internalTrafficPolicy
// Cluster (not for ExternalName), externalTrafficPolicy Cluster for an
// externally accessible Service (ExternallyAccessible),
// allocateLoadBalancerNodePorts true for a LoadBalancer, port protocol
// TCP, targetPort = port.
func defaultService(sp *corev1.ServiceSpec) {
	if sp.Type == "" {
		sp.Type = corev1.ServiceTypeClusterIP
	}
	// As kube-apiserver's defaultOnRead: an object stored with clusterIP
	// only (written before clusterIPs, or straight to the store) has it
	// as clusterIPs too.
	if sp.ClusterIP != "" && len(sp.ClusterIPs) == 0 && sp.Type != corev1.ServiceTypeExternalName {
		sp.ClusterIPs = []string{sp.ClusterIP}
	}
	if sp.SessionAffinity == "" {
		sp.SessionAffinity = corev1.ServiceAffinityNone
	}
	if sp.SessionAffinity == corev1.ServiceAffinityClientIP &&
		(sp.SessionAffinityConfig == nil || sp.SessionAffinityConfig.ClientIP == nil || sp.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil) {
		timeout := corev1.DefaultClientIPServiceAffinitySeconds
		sp.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout}}
	}
	if sp.Type != corev1.ServiceTypeExternalName && sp.InternalTrafficPolicy == nil {
		p := corev1.ServiceInternalTrafficPolicyCluster
		sp.InternalTrafficPolicy = &p
	}
	if externallyAccessible(sp) && sp.ExternalTrafficPolicy == "" {
		sp.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	if sp.Type == corev1.ServiceTypeLoadBalancer && sp.AllocateLoadBalancerNodePorts == nil {
		t := true
		sp.AllocateLoadBalancerNodePorts = &t
	}
	for i := range sp.Ports {
		p := &sp.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort.Type == intstr.Int && p.TargetPort.IntVal == 0 && p.TargetPort.StrVal == "" {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
}

// externallyAccessible is Kubernetes' service.ExternallyAccessible: a
// LoadBalancer, a NodePort, or a ClusterIP Service with externalIPs.
func externallyAccessible(sp *corev1.ServiceSpec) bool {
	return sp.Type == corev1.ServiceTypeLoadBalancer || sp.Type == corev1.ServiceTypeNodePort ||
		(sp.Type == corev1.ServiceTypeClusterIP && len(sp.ExternalIPs) > 0)
}

// NeedsHealthCheckNodePort reports whether sp gets a healthCheckNodePort
// (Kubernetes' NeedsHealthCheck): a LoadBalancer with
// externalTrafficPolicy Local.
func NeedsHealthCheckNodePort(sp *corev1.ServiceSpec) bool {
	return sp.Type == corev1.ServiceTypeLoadBalancer && sp.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

func needsNodePorts(sp *corev1.ServiceSpec) bool {
	return sp.Type == corev1.ServiceTypeNodePort || sp.Type == corev1.ServiceTypeLoadBalancer
}

// normalizeClusterIPs is the strategy's NormalizeClusterIPs: it keeps
// clusterIPs in step with clusterIP (old nil: a create).
func normalizeClusterIPs(old, svc *corev1.Service) {
	sp := &svc.Spec
	if old == nil {
		if sp.ClusterIP != "" && len(sp.ClusterIPs) == 0 {
			sp.ClusterIPs = []string{sp.ClusterIP}
		}
		return
	}
	// An old client that sent clusterIP only.
	if len(old.Spec.ClusterIPs) > 0 && len(sp.ClusterIPs) == 0 && old.Spec.ClusterIP == sp.ClusterIP {
		sp.ClusterIPs = old.Spec.ClusterIPs
	}
	if old.Spec.ClusterIP != sp.ClusterIP && slices.Equal(old.Spec.ClusterIPs, sp.ClusterIPs) {
		if sp.ClusterIP == "" {
			sp.ClusterIPs = nil // cleared (the type change decides whether that is allowed)
		} else {
			sp.ClusterIPs = []string{sp.ClusterIP} // changed: validation refuses it
		}
	}
}

// prepareServiceUpdate is the strategy's PrepareForUpdate:
// patchAllocatedValues (a resubmitted manifest keeps the allocated
// clusterIP(s), nodePorts by port name, healthCheckNodePort),
// NormalizeClusterIPs, then dropTypeDependentFields: on a change to a type
// that does not use them, the fields the user did not change themselves
// are dropped, so the allocator releases them: clusterIP(s), ipFamilies
// and ipFamilyPolicy (to ExternalName), nodePorts (from NodePort or
// LoadBalancer), healthCheckNodePort, allocateLoadBalancerNodePorts and
// loadBalancerClass (from LoadBalancer), externalTrafficPolicy (to a type
// that is not externally accessible).
func prepareServiceUpdate(svc, old *corev1.Service) {
	sp, op := &svc.Spec, &old.Spec
	// patchAllocatedValues
	if sp.Type != corev1.ServiceTypeExternalName && op.Type != corev1.ServiceTypeExternalName {
		if sp.ClusterIP == "" {
			sp.ClusterIP = op.ClusterIP
		}
		if len(sp.ClusterIPs) == 0 {
			sp.ClusterIPs = op.ClusterIPs
		}
	}
	if needsNodePorts(sp) && needsNodePorts(op) {
		byName := map[string]int32{}
		for _, p := range op.Ports {
			byName[p.Name] = p.NodePort
		}
		for i := range sp.Ports {
			if sp.Ports[i].NodePort == 0 {
				sp.Ports[i].NodePort = byName[sp.Ports[i].Name]
			}
		}
	}
	// The new object is not defaulted yet: a sent externalTrafficPolicy
	// or none, which defaults to Cluster.
	etp := func(s *corev1.ServiceSpec) corev1.ServiceExternalTrafficPolicy {
		if s.ExternalTrafficPolicy == "" && externallyAccessible(s) {
			return corev1.ServiceExternalTrafficPolicyCluster
		}
		return s.ExternalTrafficPolicy
	}
	needsHC := func(s *corev1.ServiceSpec) bool {
		return s.Type == corev1.ServiceTypeLoadBalancer && etp(s) == corev1.ServiceExternalTrafficPolicyLocal
	}
	if needsHC(sp) && needsHC(op) && sp.HealthCheckNodePort == 0 {
		sp.HealthCheckNodePort = op.HealthCheckNodePort
	}
	normalizeClusterIPs(old, svc)

	// dropTypeDependentFields
	if op.Type != corev1.ServiceTypeExternalName && sp.Type == corev1.ServiceTypeExternalName {
		if op.ClusterIP == sp.ClusterIP && slices.Equal(op.ClusterIPs, sp.ClusterIPs) {
			sp.ClusterIP, sp.ClusterIPs = "", nil
		}
		if reflect.DeepEqual(op.IPFamilies, sp.IPFamilies) {
			sp.IPFamilies = nil
		}
		if ptrString(op.IPFamilyPolicy) == ptrString(sp.IPFamilyPolicy) {
			sp.IPFamilyPolicy = nil
		}
	}
	if needsNodePorts(op) && !needsNodePorts(sp) {
		oldPorts := sets.New[int32]()
		for _, p := range op.Ports {
			if p.NodePort != 0 {
				oldPorts.Insert(p.NodePort)
			}
		}
		same := true
		for _, p := range sp.Ports {
			if p.NodePort != 0 && !oldPorts.Has(p.NodePort) {
				same = false
			}
		}
		if same {
			for i := range sp.Ports {
				sp.Ports[i].NodePort = 0
			}
		}
	}
	if needsHC(op) && !needsHC(sp) && op.HealthCheckNodePort == sp.HealthCheckNodePort {
		sp.HealthCheckNodePort = 0
	}
	if op.Type == corev1.ServiceTypeLoadBalancer && sp.Type != corev1.ServiceTypeLoadBalancer {
		if sp.AllocateLoadBalancerNodePorts != nil && op.AllocateLoadBalancerNodePorts != nil && *sp.AllocateLoadBalancerNodePorts == *op.AllocateLoadBalancerNodePorts {
			sp.AllocateLoadBalancerNodePorts = nil
		}
		if ptrString(op.LoadBalancerClass) == ptrString(sp.LoadBalancerClass) {
			sp.LoadBalancerClass = nil
		}
	}
	if externallyAccessible(op) && !externallyAccessible(sp) && op.ExternalTrafficPolicy == sp.ExternalTrafficPolicy {
		sp.ExternalTrafficPolicy = ""
	}
}

func ptrString[T ~string](p *T) string {
	if p == nil {
		return ""
	}
	return string(*p)
}

func isHeadless(sp *corev1.ServiceSpec) bool {
	return len(sp.ClusterIPs) == 1 && sp.ClusterIPs[0] == corev1.ClusterIPNone
}

// validateService is Kubernetes' ValidateService (metadata aside): type
// and ports (required unless headless or ExternalName; names unique and
// required when more than one; port, targetPort, protocol, appProtocol;
// one port number per protocol; no duplicate nodePort; nodePort only for
// NodePort and LoadBalancer), clusterIP "None" not for NodePort and
// LoadBalancer, ExternalName's externalName (a DNS-1123 subdomain,
// required) without clusterIPs or families, the selector's labels,
// sessionAffinity (and ClientIP's timeoutSeconds 1-86400), the
// clusterIP/clusterIPs/ipFamilies/ipFamilyPolicy fields
// (ValidateServiceClusterIPsRelatedFields), externalIPs (IPs that are not
// special: ValidateNonSpecialIP), loadBalancerIP and
// loadBalancerSourceRanges, allocateLoadBalancerNodePorts and
// loadBalancerClass (LoadBalancer only), the traffic policies,
// healthCheckNodePort (LoadBalancer with externalTrafficPolicy Local
// only) and trafficDistribution. The healthCheckNodePort a LoadBalancer
// Local needs is filled by the apiserver's allocator, so it is not
// required here.
func validateService(svc *corev1.Service) field.ErrorList {
	p := field.NewPath("spec")
	sp := &svc.Spec
	var errs field.ErrorList
	headless := isHeadless(sp)
	if len(sp.Ports) == 0 && !headless && sp.ClusterIP != corev1.ClusterIPNone && sp.Type != corev1.ServiceTypeExternalName {
		errs = append(errs, field.Required(p.Child("ports"), ""))
	}
	switch sp.Type {
	case corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort:
		if headless {
			errs = append(errs, field.Invalid(p.Child("clusterIPs").Index(0), sp.ClusterIPs[0], fmt.Sprintf("may not be set to 'None' for %s services", sp.Type)))
		}
	case corev1.ServiceTypeExternalName:
		if len(sp.ClusterIPs) > 0 {
			errs = append(errs, field.Forbidden(p.Child("clusterIPs"), "may not be set for ExternalName services"))
		}
		if len(sp.IPFamilies) > 0 {
			errs = append(errs, field.Forbidden(p.Child("ipFamilies"), "may not be set for ExternalName services"))
		}
		if sp.IPFamilyPolicy != nil {
			errs = append(errs, field.Forbidden(p.Child("ipFamilyPolicy"), "may not be set for ExternalName services"))
		}
		// A CNAME may end in a dot (fully qualified).
		if cname := strings.TrimSuffix(sp.ExternalName, "."); cname != "" {
			for _, msg := range validation.IsDNS1123Subdomain(cname) {
				errs = append(errs, field.Invalid(p.Child("externalName"), cname, msg))
			}
		} else {
			errs = append(errs, field.Required(p.Child("externalName"), ""))
		}
	}

	names := sets.New[string]()
	type portProto struct {
		port     int32
		protocol corev1.Protocol
	}
	seen, seenNode := sets.New[portProto](), sets.New[portProto]()
	for i, port := range sp.Ports {
		pp := p.Child("ports").Index(i)
		if len(sp.Ports) > 1 && port.Name == "" {
			errs = append(errs, field.Required(pp.Child("name"), "must be specified when there is more than one port"))
		} else if port.Name != "" {
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
		if port.Protocol == "" {
			errs = append(errs, field.Required(pp.Child("protocol"), ""))
		} else if !protocols.Has(string(port.Protocol)) {
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
		if port.AppProtocol != nil {
			for _, msg := range validation.IsQualifiedName(*port.AppProtocol) {
				errs = append(errs, field.Invalid(pp.Child("appProtocol"), *port.AppProtocol, msg))
			}
		}
		// As Kubernetes' ValidateService: one port number per protocol.
		if key := (portProto{port.Port, port.Protocol}); seen.Has(key) {
			errs = append(errs, field.Duplicate(pp, fmt.Sprintf("%d/%s", port.Port, port.Protocol)))
		} else {
			seen.Insert(key)
		}
		if port.NodePort != 0 {
			if !needsNodePorts(sp) {
				errs = append(errs, field.Forbidden(pp.Child("nodePort"), fmt.Sprintf("may not be used when `type` is '%s'", sp.Type)))
			}
			if key := (portProto{port.NodePort, port.Protocol}); seenNode.Has(key) {
				errs = append(errs, field.Duplicate(pp.Child("nodePort"), port.NodePort))
			} else {
				seenNode.Insert(key)
			}
		}
	}
	if sp.Selector != nil {
		errs = append(errs, metav1validation.ValidateLabels(sp.Selector, p.Child("selector"))...)
	}

	if sp.SessionAffinity == "" {
		errs = append(errs, field.Required(p.Child("sessionAffinity"), ""))
	} else if !sessionAffinities.Has(string(sp.SessionAffinity)) {
		errs = append(errs, field.NotSupported(p.Child("sessionAffinity"), sp.SessionAffinity, sets.List(sessionAffinities)))
	}
	ap := p.Child("sessionAffinityConfig")
	switch sp.SessionAffinity {
	case corev1.ServiceAffinityClientIP:
		c := sp.SessionAffinityConfig
		switch {
		case c == nil:
			errs = append(errs, field.Required(ap, "when session affinity type is ClientIP"))
		case c.ClientIP == nil:
			errs = append(errs, field.Required(ap.Child("clientIP"), "when session affinity type is ClientIP"))
		case c.ClientIP.TimeoutSeconds == nil:
			errs = append(errs, field.Required(ap.Child("clientIP", "timeoutSeconds"), "when session affinity type is ClientIP"))
		case *c.ClientIP.TimeoutSeconds <= 0 || *c.ClientIP.TimeoutSeconds > MaxClientIPServiceAffinitySeconds:
			errs = append(errs, field.Invalid(ap.Child("clientIP", "timeoutSeconds"), *c.ClientIP.TimeoutSeconds,
				fmt.Sprintf("must be greater than 0 and less than %d", MaxClientIPServiceAffinitySeconds)))
		}
	case corev1.ServiceAffinityNone:
		if sp.SessionAffinityConfig != nil {
			errs = append(errs, field.Forbidden(ap, "must not be set when session affinity is None"))
		}
	}

	errs = append(errs, validateClusterIPFields(sp)...)

	for i, ip := range sp.ExternalIPs {
		ipp := p.Child("externalIPs").Index(i)
		if e := validation.IsValidIP(ipp, ip); len(e) > 0 {
			errs = append(errs, e...)
		} else {
			errs = append(errs, ValidateNonSpecialIP(ip, ipp)...)
		}
	}
	if sp.Type == "" {
		errs = append(errs, field.Required(p.Child("type"), ""))
	} else if !serviceTypes.Has(string(sp.Type)) {
		errs = append(errs, field.NotSupported(p.Child("type"), sp.Type, sets.List(serviceTypes)))
	}

	if sp.LoadBalancerIP != "" {
		errs = append(errs, validation.IsValidIPForLegacyField(p.Child("loadBalancerIP"), sp.LoadBalancerIP, true, nil)...)
	}
	if len(sp.LoadBalancerSourceRanges) > 0 {
		// Kubernetes' path, capitalized as it is there.
		rp := p.Child("LoadBalancerSourceRanges")
		if sp.Type != corev1.ServiceTypeLoadBalancer {
			errs = append(errs, field.Forbidden(rp, "may only be used when `type` is 'LoadBalancer'"))
		}
		for i, v := range sp.LoadBalancerSourceRanges {
			errs = append(errs, validation.IsValidCIDR(rp.Index(i), strings.TrimSpace(v))...)
		}
	}
	if sp.AllocateLoadBalancerNodePorts != nil && sp.Type != corev1.ServiceTypeLoadBalancer {
		errs = append(errs, field.Forbidden(p.Child("allocateLoadBalancerNodePorts"), "may only be used when `type` is 'LoadBalancer'"))
	}
	if sp.LoadBalancerClass != nil {
		if sp.Type != corev1.ServiceTypeLoadBalancer {
			errs = append(errs, field.Forbidden(p.Child("loadBalancerClass"), "may only be used when `type` is 'LoadBalancer'"))
		} else {
			for _, msg := range validation.IsQualifiedName(*sp.LoadBalancerClass) {
				errs = append(errs, field.Invalid(p.Child("loadBalancerClass"), *sp.LoadBalancerClass, msg))
			}
		}
	}

	// validateServiceExternalTrafficPolicy
	if !externallyAccessible(sp) {
		if sp.ExternalTrafficPolicy != "" {
			errs = append(errs, field.Invalid(p.Child("externalTrafficPolicy"), sp.ExternalTrafficPolicy, "may only be set for externally-accessible services"))
		}
	} else if sp.ExternalTrafficPolicy == "" {
		errs = append(errs, field.Required(p.Child("externalTrafficPolicy"), ""))
	} else if !externalTrafficPolicies.Has(string(sp.ExternalTrafficPolicy)) {
		errs = append(errs, field.NotSupported(p.Child("externalTrafficPolicy"), sp.ExternalTrafficPolicy, sets.List(externalTrafficPolicies)))
	}
	if !NeedsHealthCheckNodePort(sp) {
		if sp.HealthCheckNodePort != 0 {
			errs = append(errs, field.Invalid(p.Child("healthCheckNodePort"), sp.HealthCheckNodePort, "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
		}
	} else if sp.HealthCheckNodePort != 0 {
		for _, msg := range validation.IsValidPortNum(int(sp.HealthCheckNodePort)) {
			errs = append(errs, field.Invalid(p.Child("healthCheckNodePort"), sp.HealthCheckNodePort, msg))
		}
	}
	if sp.InternalTrafficPolicy == nil {
		if sp.Type != corev1.ServiceTypeExternalName {
			errs = append(errs, field.Required(p.Child("internalTrafficPolicy"), ""))
		}
	} else if !internalTrafficPolicies.Has(string(*sp.InternalTrafficPolicy)) {
		errs = append(errs, field.NotSupported(p.Child("internalTrafficPolicy"), *sp.InternalTrafficPolicy, sets.List(internalTrafficPolicies)))
	}
	if sp.TrafficDistribution != nil && !slices.Contains(trafficDistributions, *sp.TrafficDistribution) {
		errs = append(errs, field.NotSupported(p.Child("trafficDistribution"), *sp.TrafficDistribution, trafficDistributions))
	}
	return errs
}

// validateClusterIPFields is Kubernetes'
// ValidateServiceClusterIPsRelatedFields: clusterIPs[0] is clusterIP (and
// empty without it), each a valid IP (or a lone "None"), at most two and
// of different families, matching ipFamilies; ipFamilies and
// ipFamilyPolicy of the supported values. What this cluster supports
// (one IPv4 range) is the allocator's check.
func validateClusterIPFields(sp *corev1.ServiceSpec) field.ErrorList {
	if sp.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	p := field.NewPath("spec")
	ipsPath := p.Child("clusterIPs")
	var errs field.ErrorList
	if sp.ClusterIP != "" {
		if len(sp.ClusterIPs) == 0 {
			errs = append(errs, field.Required(ipsPath, ""))
		} else if sp.ClusterIPs[0] != sp.ClusterIP {
			errs = append(errs, field.Invalid(ipsPath, sp.ClusterIPs, "first value must match `clusterIP`"))
		}
	} else if len(sp.ClusterIPs) != 0 {
		errs = append(errs, field.Invalid(ipsPath, sp.ClusterIPs, "must be empty when `clusterIP` is not specified"))
	}
	seen := sets.New[corev1.IPFamily]()
	for i, f := range sp.IPFamilies {
		if !ipFamilies.Has(string(f)) {
			errs = append(errs, field.NotSupported(p.Child("ipFamilies").Index(i), f, sets.List(ipFamilies)))
		}
		if seen.Has(f) {
			errs = append(errs, field.Duplicate(p.Child("ipFamilies").Index(i), f))
		}
		seen.Insert(f)
	}
	if sp.IPFamilyPolicy != nil && !ipFamilyPolicies.Has(string(*sp.IPFamilyPolicy)) {
		errs = append(errs, field.NotSupported(p.Child("ipFamilyPolicy"), *sp.IPFamilyPolicy, sets.List(ipFamilyPolicies)))
	}
	bad := false
	for i, ip := range sp.ClusterIPs {
		if i == 0 && ip == corev1.ClusterIPNone {
			if len(sp.ClusterIPs) > 1 {
				bad = true
				errs = append(errs, field.Invalid(ipsPath, sp.ClusterIPs, "'None' must be the first and only value"))
			}
			continue
		}
		e := validation.IsValidIP(ipsPath.Index(i), ip)
		bad = bad || len(e) > 0
		errs = append(errs, e...)
	}
	if len(sp.ClusterIPs) > 2 {
		errs = append(errs, field.Invalid(ipsPath, sp.ClusterIPs, "may only hold up to 2 values"))
	}
	if bad {
		return errs
	}
	if len(sp.ClusterIPs) == 2 && isIPv6(sp.ClusterIPs[0]) == isIPv6(sp.ClusterIPs[1]) {
		errs = append(errs, field.Invalid(ipsPath, sp.ClusterIPs, "may specify no more than one IP for each IP family"))
	}
	if !isHeadless(sp) {
		for i, ip := range sp.ClusterIPs {
			if i >= len(sp.IPFamilies) {
				break
			}
			if sp.IPFamilies[i] == corev1.IPv4Protocol && isIPv6(ip) {
				errs = append(errs, field.Invalid(ipsPath.Index(i), ip, fmt.Sprintf("expected an IPv4 value as indicated by `ipFamilies[%v]`", i)))
			}
			if sp.IPFamilies[i] == corev1.IPv6Protocol && !isIPv6(ip) {
				errs = append(errs, field.Invalid(ipsPath.Index(i), ip, fmt.Sprintf("expected an IPv6 value as indicated by `ipFamilies[%v]`", i)))
			}
		}
	}
	return errs
}

func isIPv6(ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && a.Is6() && !a.Is4In6()
}

// validateServiceUpdate is the update part of Kubernetes'
// ValidateServiceUpdate: clusterIPs may not change once set (unless to or
// from ExternalName or between headless Services), nor ipFamilies, nor a
// LoadBalancer's loadBalancerClass, nor the healthCheckNodePort of a
// Service that keeps needing one.
func validateServiceUpdate(svc, old *corev1.Service) field.ErrorList {
	sp, op := &svc.Spec, &old.Spec
	var errs field.ErrorList
	ext := sp.Type == corev1.ServiceTypeExternalName || op.Type == corev1.ServiceTypeExternalName
	ipsPath := field.NewPath("spec", "clusterIPs")
	if !ext && !(isHeadless(sp) && isHeadless(op)) {
		switch {
		case len(op.ClusterIPs) == len(sp.ClusterIPs):
			for i, ip := range op.ClusterIPs {
				if ip != sp.ClusterIPs[i] {
					errs = append(errs, field.Invalid(ipsPath.Index(i), sp.ClusterIPs, "may not change once set"))
				}
			}
		case len(op.ClusterIPs) > len(sp.ClusterIPs):
			if len(sp.ClusterIPs) == 0 {
				errs = append(errs, field.Invalid(ipsPath.Index(0), sp.ClusterIPs, "primary clusterIP can not be unset"))
			} else if sp.ClusterIPs[0] != op.ClusterIPs[0] {
				errs = append(errs, field.Invalid(ipsPath.Index(0), sp.ClusterIPs, "may not change once set"))
			}
		case len(op.ClusterIPs) > 0 && sp.ClusterIPs[0] != op.ClusterIPs[0]:
			errs = append(errs, field.Invalid(ipsPath.Index(0), sp.ClusterIPs, "may not change once set"))
		}
	}
	if !ext && isHeadless(sp) == isHeadless(op) && !isHeadless(sp) && len(op.IPFamilies) > 0 {
		if len(sp.IPFamilies) == 0 || sp.IPFamilies[0] != op.IPFamilies[0] {
			errs = append(errs, field.Invalid(field.NewPath("spec", "ipFamilies").Index(0), sp.IPFamilies, "may not change once set"))
		}
	}
	if sp.Type == corev1.ServiceTypeLoadBalancer && op.Type == corev1.ServiceTypeLoadBalancer && ptrString(sp.LoadBalancerClass) != ptrString(op.LoadBalancerClass) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "loadBalancerClass"), sp.LoadBalancerClass, "may not change once set"))
	}
	if NeedsHealthCheckNodePort(sp) && NeedsHealthCheckNodePort(op) && sp.HealthCheckNodePort != op.HealthCheckNodePort && sp.HealthCheckNodePort != 0 {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "healthCheckNodePort"), "field is immutable"))
	}
	return errs
}

// ValidateNonSpecialIP is Kubernetes' ValidateNonSpecialIP, used for
// Services' externalIPs: ip (already a valid IP) may not be unspecified
// (0.0.0.0, ::), loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16,
// fe80::/10) or link-local multicast (224.0.0.0/24, ff02::/10).
func ValidateNonSpecialIP(ip string, p *field.Path) field.ErrorList {
	return validateSpecialIP(ip, p, false)
}

// validateSpecialIP is ValidateNonSpecialIP; allowLoopback keeps loopback
// addresses (Endpoints and EndpointSlices, see endpoints.go).
func validateSpecialIP(ip string, p *field.Path, allowLoopback bool) field.ErrorList {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return field.ErrorList{field.Invalid(p, ip, "must be a valid IP address")}
	}
	a = a.Unmap()
	var errs field.ErrorList
	if a.IsUnspecified() {
		errs = append(errs, field.Invalid(p, ip, fmt.Sprintf("may not be unspecified (%v)", ip)))
	}
	if a.IsLoopback() && !allowLoopback {
		errs = append(errs, field.Invalid(p, ip, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
	}
	if a.IsLinkLocalUnicast() {
		errs = append(errs, field.Invalid(p, ip, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
	}
	if a.IsLinkLocalMulticast() {
		errs = append(errs, field.Invalid(p, ip, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"))
	}
	return errs
}
