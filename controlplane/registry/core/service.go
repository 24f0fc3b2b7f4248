package core

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Service is the services kind, as pkg/registry/core/service: names are
// DNS-1035 labels; defaults as SetDefaults_Service (defaultService); the
// strategy's NormalizeClusterIPs on create and patchAllocatedValues,
// NormalizeClusterIPs and dropTypeDependentFields on update
// (prepareServiceUpdate); ValidateService and ValidateServiceUpdate
// (validateService, validateServiceUpdate). ClusterIPs, nodePorts and
// healthCheckNodePorts are allocated by the apiserver (an admission step
// that needs every service's addresses and the cluster's ranges), not
// here: that step also refuses what depends on the cluster (address
// families, the service CIDR).
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
			svc := obj.(*corev1.Service)
			svc.Status = corev1.ServiceStatus{}
			normalizeClusterIPs(nil, svc)
		},
		PrepareForUpdate: func(obj, old store.Object) { prepareServiceUpdate(obj.(*corev1.Service), old.(*corev1.Service)) },
		Validate:         func(obj store.Object) field.ErrorList { return validateService(obj.(*corev1.Service)) },
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			return validateServiceUpdate(obj.(*corev1.Service), old.(*corev1.Service))
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
			ext := serviceExternalIP(x)
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

// serviceExternalIP is the EXTERNAL-IP cell of kubectl get services, as
// Kubernetes' printers (getServiceExternalIP): a LoadBalancer's ingress
// addresses (IP, else hostname) then its externalIPs, "<pending>" while it
// has neither (ingress addresses sorted, each once); the externalIPs or "<none>" for ClusterIP and NodePort; the
// externalName of an ExternalName Service. Like the printers' non-wide
// form, a list of ingress addresses longer than 16 characters is cut to
// 13 and "...".
func serviceExternalIP(svc *corev1.Service) string {
	switch svc.Spec.Type {
	case corev1.ServiceTypeLoadBalancer:
		var lb []string
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				lb = append(lb, in.IP)
			} else if in.Hostname != "" {
				lb = append(lb, in.Hostname)
			}
		}
		slices.Sort(lb)
		ingress := strings.Join(slices.Compact(lb), ",")
		if len(ingress) > 16 {
			ingress = ingress[:13] + "..."
		}
		var out []string
		if ingress != "" {
			out = append(out, strings.Split(ingress, ",")...)
		}
		out = append(out, svc.Spec.ExternalIPs...)
		if len(out) == 0 {
			return "<pending>"
		}
		return strings.Join(out, ",")
	case corev1.ServiceTypeExternalName:
		return svc.Spec.ExternalName
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, "":
		if len(svc.Spec.ExternalIPs) > 0 {
			return strings.Join(svc.Spec.ExternalIPs, ",")
		}
		return "<none>"
	}
	return "<unknown>"
}
