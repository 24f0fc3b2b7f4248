// Package coordination holds the kinds of the coordination.k8s.io/v1 API
// group, one file per kind.
package coordination

import (
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Kinds returns the coordination kinds in discovery order.
func Kinds() []registry.Kind { return []registry.Kind{Lease()} }

// Lease is the leases kind (node heartbeats, in kube-node-lease): no
// rules beyond metadata.
func Lease() registry.Kind {
	return registry.Kind{Resource: store.Leases}
}
