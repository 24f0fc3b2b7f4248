// Package discovery holds the kinds of the discovery.k8s.io/v1 API group,
// one file per kind.
package discovery

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

// Kinds returns the discovery kinds in discovery order.
func Kinds() []registry.Kind { return []registry.Kind{EndpointSlice()} }

// EndpointSlice is the endpointslices kind (written by the endpointslice
// controller): port names default to "" and protocols to TCP
// (SetDefaults_EndpointPort); validation is Kubernetes'
// ValidateEndpointSlice and ValidateEndpointSliceUpdate
// (validateEndpointSlice); its table is kubectl's (address type, ports,
// endpoints).
func EndpointSlice() registry.Kind {
	return registry.Kind{
		Resource: store.EndpointSlices,
		Default: func(obj store.Object) {
			sl := obj.(*discoveryv1.EndpointSlice)
			for i := range sl.Ports {
				if sl.Ports[i].Name == nil {
					sl.Ports[i].Name = new(string)
				}
				if sl.Ports[i].Protocol == nil {
					tcp := corev1.ProtocolTCP
					sl.Ports[i].Protocol = &tcp
				}
			}
		},
		Validate: func(obj store.Object) field.ErrorList {
			return validateEndpointSlice(obj.(*discoveryv1.EndpointSlice), addressTypes)
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			n, o := obj.(*discoveryv1.EndpointSlice), old.(*discoveryv1.EndpointSlice)
			var errs field.ErrorList
			if n.AddressType != o.AddressType {
				errs = append(errs, field.Invalid(field.NewPath("addressType"), n.AddressType, "field is immutable"))
			}
			return errs
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn, registry.Column("AddressType", "string", "The IP protocol for this slice.", 0),
			registry.Column("Ports", "string", "The ports contained in this slice.", 0), registry.Column("Endpoints", "string", "Endpoints in this slice.", 0), registry.AgeColumn},
		Row: func(obj store.Object) []any {
			x := obj.(*discoveryv1.EndpointSlice)
			var ports, addrs []string
			for _, p := range x.Ports {
				if p.Port != nil {
					ports = append(ports, fmt.Sprint(*p.Port))
				}
			}
			for _, e := range x.Endpoints {
				addrs = append(addrs, e.Addresses...)
			}
			return []any{x.Name, string(x.AddressType), registry.OrNone(strings.Join(ports, ",")), registry.OrNone(strings.Join(addrs, ",")), registry.Age(obj)}
		},
	}
}

// Limits of one EndpointSlice, as Kubernetes' discovery validation.
const (
	MaxEndpoints          = 1000
	MaxAddressesPerEndpt  = 100
	MaxPorts              = 100
	maxTopologyLabels     = 16
	deprecatedAddressType = discoveryv1.AddressType("IP")
)

var (
	addressTypes = sets.New(string(discoveryv1.AddressTypeIPv4), string(discoveryv1.AddressTypeIPv6), string(discoveryv1.AddressTypeFQDN))
	protocols    = sets.New(string(corev1.ProtocolTCP), string(corev1.ProtocolUDP), string(corev1.ProtocolSCTP))
)

// validateEndpointSlice is Kubernetes' ValidateEndpointSlice: addressType
// required and IPv4, IPv6 or FQDN; at most MaxEndpoints endpoints, each
// with 1 to MaxAddressesPerEndpt addresses of the slice's type (IPv4 and
// IPv6 addresses valid IPs of that family and not special, as
// core.ValidateEndpointIP says: loopback is accepted, unspecified and
// link-local are not), a DNS-1123 label hostname, a DNS subdomain
// nodeName and at most 16 valid topology labels; at most MaxPorts ports
// with unique DNS-1123 label names, numbers 1-65535, a supported protocol
// and a qualified-name appProtocol.
func validateEndpointSlice(sl *discoveryv1.EndpointSlice, valid sets.Set[string]) field.ErrorList {
	var errs field.ErrorList
	if sl.AddressType == "" {
		errs = append(errs, field.Required(field.NewPath("addressType"), ""))
	} else if !valid.Has(string(sl.AddressType)) {
		errs = append(errs, field.NotSupported(field.NewPath("addressType"), sl.AddressType, sets.List(valid)))
	}
	ep := field.NewPath("endpoints")
	if len(sl.Endpoints) > MaxEndpoints {
		errs = append(errs, field.TooMany(ep, len(sl.Endpoints), MaxEndpoints))
	} else {
		for i, e := range sl.Endpoints {
			ap := ep.Index(i).Child("addresses")
			if len(e.Addresses) == 0 {
				errs = append(errs, field.Required(ap, "must contain at least 1 address"))
			} else if len(e.Addresses) > MaxAddressesPerEndpt {
				errs = append(errs, field.TooMany(ap, len(e.Addresses), MaxAddressesPerEndpt))
				continue
			}
			for j, a := range e.Addresses {
				errs = append(errs, validateAddress(sl.AddressType, a, ap.Index(j))...)
			}
			if e.Hostname != nil {
				for _, msg := range validation.IsDNS1123Label(*e.Hostname) {
					errs = append(errs, field.Invalid(ep.Index(i).Child("hostname"), *e.Hostname, msg))
				}
			}
			if e.NodeName != nil {
				for _, msg := range validation.IsDNS1123Subdomain(*e.NodeName) {
					errs = append(errs, field.Invalid(ep.Index(i).Child("nodeName"), *e.NodeName, msg))
				}
			}
			if len(e.DeprecatedTopology) > maxTopologyLabels {
				errs = append(errs, field.TooMany(ep.Index(i).Child("deprecatedTopology"), len(e.DeprecatedTopology), maxTopologyLabels))
			}
			errs = append(errs, metav1validation.ValidateLabels(e.DeprecatedTopology, ep.Index(i).Child("deprecatedTopology"))...)
		}
	}
	pp := field.NewPath("ports")
	if len(sl.Ports) > MaxPorts {
		return append(errs, field.TooMany(pp, len(sl.Ports), MaxPorts))
	}
	names := sets.New[string]()
	for i, p := range sl.Ports {
		ip := pp.Index(i)
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if name != "" {
			for _, msg := range validation.IsDNS1123Label(name) {
				errs = append(errs, field.Invalid(ip.Child("name"), name, msg))
			}
		}
		if names.Has(name) {
			errs = append(errs, field.Duplicate(ip.Child("name"), name))
		}
		names.Insert(name)
		if p.Port != nil {
			for _, msg := range validation.IsValidPortNum(int(*p.Port)) {
				errs = append(errs, field.Invalid(ip.Child("port"), *p.Port, msg))
			}
		}
		if p.Protocol == nil {
			errs = append(errs, field.Required(ip.Child("protocol"), ""))
		} else if !protocols.Has(string(*p.Protocol)) {
			errs = append(errs, field.NotSupported(ip.Child("protocol"), *p.Protocol, sets.List(protocols)))
		}
		if p.AppProtocol != nil {
			for _, msg := range validation.IsQualifiedName(*p.AppProtocol) {
				errs = append(errs, field.Invalid(ip.Child("appProtocol"), *p.AppProtocol, msg))
			}
		}
	}
	return errs
}

// validateAddress checks one address of a slice of type at.
func validateAddress(at discoveryv1.AddressType, a string, p *field.Path) field.ErrorList {
	switch at {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6:
		if errs := validation.IsValidIP(p, a); len(errs) > 0 {
			return errs
		}
		if v6 := strings.Contains(a, ":"); v6 != (at == discoveryv1.AddressTypeIPv6) {
			return field.ErrorList{field.Invalid(p, a, fmt.Sprintf("must be a valid %s address", at))}
		}
		return core.ValidateEndpointIP(a, p)
	case discoveryv1.AddressTypeFQDN:
		return validation.IsFullyQualifiedDomainName(p, a)
	case deprecatedAddressType:
		return validation.IsValidIP(p, a)
	}
	return nil
}
