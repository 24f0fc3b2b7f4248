package core

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Endpoints is the endpoints kind (written by the endpoints controller);
// its table lists at most three addresses, as kubectl's.
func Endpoints() registry.Kind {
	return registry.Kind{
		Resource: store.Endpoints,
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
