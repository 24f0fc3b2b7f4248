package core

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Service is the services kind, as pkg/registry/core/service: names are
// DNS-1035 labels; type ClusterIP, sessionAffinity None, traffic policies
// Cluster and port protocol TCP by default, targetPort defaulting to
// port; the clusterIP is immutable once set. ClusterIPs and nodePorts are
// allocated by the apiserver (an admission step that needs every
// service's addresses), not here.
func Service() registry.Kind {
	return registry.Kind{
		Resource:       store.Services,
		Categories:     []string{"all"},
		NameValidation: apivalidation.NameIsDNS1035Label,
		// proxy is served by the apiserver (proxy_subresource.go).
		Subresources: []registry.Subresource{{Name: "proxy", Kind: "ServiceProxyOptions", Verbs: metav1.Verbs{"create", "delete", "get", "patch", "update"}}},
		Status:       true,
		Default:      func(obj store.Object) { defaultService(&obj.(*corev1.Service).Spec) },
		PrepareForCreate: func(obj store.Object) {
			obj.(*corev1.Service).Status = corev1.ServiceStatus{}
		},
		Validate: func(obj store.Object) field.ErrorList { return validateService(obj.(*corev1.Service)) },
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			o, os := obj.(*corev1.Service), old.(*corev1.Service)
			if os.Spec.ClusterIP != "" && o.Spec.ClusterIP != os.Spec.ClusterIP && o.Spec.Type != corev1.ServiceTypeExternalName {
				return field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIP"), o.Spec.ClusterIP, "field is immutable")}
			}
			return nil
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn, registry.Column("Type", "string", "The type of the service.", 0),
			registry.Column("Cluster-IP", "string", "IP address of the service.", 0), registry.Column("External-IP", "string", "External IP of the service.", 0),
			registry.Column("Port(s)", "string", "The ports of the service.", 0), registry.AgeColumn, registry.Column("Selector", "string", "The service's selector.", 1)},
		Row: func(obj store.Object) []any {
			x := obj.(*corev1.Service)
			var ports []string
			for _, p := range x.Spec.Ports {
				if p.NodePort != 0 {
					ports = append(ports, fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol))
				} else {
					ports = append(ports, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
				}
			}
			ext := "<none>"
			if len(x.Spec.ExternalIPs) > 0 {
				ext = strings.Join(x.Spec.ExternalIPs, ",")
			}
			sel := make([]string, 0, len(x.Spec.Selector))
			for k, v := range x.Spec.Selector {
				sel = append(sel, k+"="+v)
			}
			sort.Strings(sel)
			return []any{x.Name, string(x.Spec.Type), registry.OrNone(x.Spec.ClusterIP), ext, registry.OrNone(strings.Join(ports, ",")), registry.Age(obj), registry.OrNone(strings.Join(sel, ","))}
		},
		Fields: func(obj store.Object) fields.Set {
			o := obj.(*corev1.Service)
			return fields.Set{"spec.clusterIP": o.Spec.ClusterIP, "spec.type": string(o.Spec.Type)}
		},
	}
}

// defaultService is SetDefaults_Service for the fields orca reads.
func defaultService(sp *corev1.ServiceSpec) {
	if sp.Type == "" {
		sp.Type = corev1.ServiceTypeClusterIP
	}
	if sp.SessionAffinity == "" {
		sp.SessionAffinity = corev1.ServiceAffinityNone
	}
	if sp.Type != corev1.ServiceTypeExternalName && sp.InternalTrafficPolicy == nil {
		p := corev1.ServiceInternalTrafficPolicyCluster
		sp.InternalTrafficPolicy = &p
	}
	if (sp.Type == corev1.ServiceTypeNodePort || sp.Type == corev1.ServiceTypeLoadBalancer) && sp.ExternalTrafficPolicy == "" {
		sp.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
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
