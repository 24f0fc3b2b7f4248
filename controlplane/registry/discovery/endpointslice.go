// Package discovery holds the kinds of the discovery.k8s.io/v1 API group,
// one file per kind.
package discovery

import (
	"fmt"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Kinds returns the discovery kinds in discovery order.
func Kinds() []registry.Kind { return []registry.Kind{EndpointSlice()} }

// EndpointSlice is the endpointslices kind (written by the endpointslice
// controller); its table is kubectl's (address type, ports, endpoints).
func EndpointSlice() registry.Kind {
	return registry.Kind{
		Resource: store.EndpointSlices,
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
