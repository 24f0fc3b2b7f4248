package core

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Endpoints is the endpoints kind (written by the endpoints controller);
// port protocols default to TCP; validation is Kubernetes'
// ValidateEndpoints (validateEndpoints); its table lists at most three
// addresses, as kubectl's.
func Endpoints() registry.Kind {
	return registry.Kind{
		Resource: store.Endpoints,
		Default: func(obj store.Object) {
			for i := range obj.(*corev1.Endpoints).Subsets {
				ss := &obj.(*corev1.Endpoints).Subsets[i]
				for j := range ss.Ports {
					if ss.Ports[j].Protocol == "" {
						ss.Ports[j].Protocol = corev1.ProtocolTCP
					}
				}
			}
		},
		Validate: func(obj store.Object) field.ErrorList { return validateEndpoints(obj.(*corev1.Endpoints)) },
		Columns:  []metav1.TableColumnDefinition{registry.NameColumn, registry.Column("Endpoints", "string", "Endpoints of the service.", 0), registry.AgeColumn},
		Row: func(obj store.Object) []any {
			x := obj.(*corev1.Endpoints)
			var eps []string
			for _, ss := range x.Subsets {
				for _, a := range ss.Addresses {
					for _, p := range ss.Ports {
						eps = append(eps, fmt.Sprintf("%s:%d", a.IP, p.Port))
					}
					if len(ss.Ports) == 0 {
						eps = append(eps, a.IP)
					}
				}
			}
			if len(eps) > 3 {
				eps = append(eps[:3], fmt.Sprintf("+ %d more...", len(eps)-3))
			}
			return []any{x.Name, registry.OrNone(strings.Join(eps, ",")), registry.Age(obj)}
		},
	}
}

// validateEndpoints is Kubernetes' ValidateEndpoints (less the
// annotations): every subset has addresses or notReadyAddresses; an
// address is a valid IP that is not special (ValidateEndpointIP), with a
// DNS-1123 label hostname and a DNS subdomain nodeName; ports have names
// (DNS-1123 labels, required when more than one), numbers 1-65535, a
// supported protocol and a qualified-name appProtocol.
func validateEndpoints(ep *corev1.Endpoints) field.ErrorList {
	var errs field.ErrorList
	for i := range ep.Subsets {
		ss := &ep.Subsets[i]
		p := field.NewPath("subsets").Index(i)
		if len(ss.Addresses) == 0 && len(ss.NotReadyAddresses) == 0 {
			errs = append(errs, field.Required(p, "must specify `addresses` or `notReadyAddresses`"))
		}
		for j := range ss.Addresses {
			errs = append(errs, validateEndpointAddress(&ss.Addresses[j], p.Child("addresses").Index(j))...)
		}
		for j := range ss.NotReadyAddresses {
			errs = append(errs, validateEndpointAddress(&ss.NotReadyAddresses[j], p.Child("notReadyAddresses").Index(j))...)
		}
		for j, port := range ss.Ports {
			pp := p.Child("ports").Index(j)
			if len(ss.Ports) > 1 && port.Name == "" {
				errs = append(errs, field.Required(pp.Child("name"), ""))
			} else if port.Name != "" {
				for _, msg := range validation.IsDNS1123Label(port.Name) {
					errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
				}
			}
			for _, msg := range validation.IsValidPortNum(int(port.Port)) {
				errs = append(errs, field.Invalid(pp.Child("port"), port.Port, msg))
			}
			if port.Protocol == "" {
				errs = append(errs, field.Required(pp.Child("protocol"), ""))
			} else if !protocols.Has(string(port.Protocol)) {
				errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, sets.List(protocols)))
			}
			if port.AppProtocol != nil {
				for _, msg := range validation.IsQualifiedName(*port.AppProtocol) {
					errs = append(errs, field.Invalid(pp.Child("appProtocol"), *port.AppProtocol, msg))
				}
			}
		}
	}
	return errs
}

func validateEndpointAddress(a *corev1.EndpointAddress, p *field.Path) field.ErrorList {
	errs := ValidateEndpointIP(a.IP, p.Child("ip"))
	if a.Hostname != "" {
		for _, msg := range validation.IsDNS1123Label(a.Hostname) {
			errs = append(errs, field.Invalid(p.Child("hostname"), a.Hostname, msg))
		}
	}
	if a.NodeName != nil {
		for _, msg := range apivalidation.NameIsDNSSubdomain(*a.NodeName, false) {
			errs = append(errs, field.Invalid(p.Child("nodeName"), *a.NodeName, msg))
		}
	}
	return errs
}

// ValidateEndpointIP checks an endpoint address of Endpoints and
// EndpointSlices: a valid IP (canonical form, validation.IsValidIP) that
// is not special as Kubernetes' ValidateNonSpecialIP says, except that
// loopback addresses are accepted: a node whose InternalIP is loopback
// (orca-agent's default --node-ip 127.0.0.1, as `make run` and the tests
// on one host use) publishes pods without a pod network at it, and the
// `kubernetes` Service's endpoint is --advertise-address, loopback there
// too. Unspecified (0.0.0.0, ::), link-local (169.254.0.0/16 with the
// cloud metadata address, fe80::/10) and link-local multicast addresses
// are refused.
func ValidateEndpointIP(ip string, p *field.Path) field.ErrorList {
	if errs := validation.IsValidIP(p, ip); len(errs) > 0 {
		return errs
	}
	return validateSpecialIP(ip, p, true)
}
