// Package builtin assembles the kinds orca serves from its store
// resources: the core, apps, batch, autoscaling, coordination, node, discovery,
// apiextensions, policy, rbac.authorization.k8s.io, authentication.k8s.io, certificates.k8s.io and storage.k8s.io groups, in
// discovery order. Kinds added at run time (CustomResourceDefinitions)
// are added to the registry New returns.
package builtin

import (
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/apiextensions"
	"github.com/orca-edge/orca/controlplane/registry/apps"
	"github.com/orca-edge/orca/controlplane/registry/authentication"
	"github.com/orca-edge/orca/controlplane/registry/autoscaling"
	"github.com/orca-edge/orca/controlplane/registry/batch"
	"github.com/orca-edge/orca/controlplane/registry/certificates"
	"github.com/orca-edge/orca/controlplane/registry/coordination"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/registry/discovery"
	"github.com/orca-edge/orca/controlplane/registry/node"
	"github.com/orca-edge/orca/controlplane/registry/policy"
	"github.com/orca-edge/orca/controlplane/registry/rbac"
	"github.com/orca-edge/orca/controlplane/registry/storage"
)

// Kinds returns every built-in kind, in discovery order. A new group's
// Kinds() is appended here.
func Kinds() []registry.Kind {
	var out []registry.Kind
	for _, group := range [][]registry.Kind{core.Kinds(), apps.Kinds(), batch.Kinds(), autoscaling.Kinds(), coordination.Kinds(), node.Kinds(), discovery.Kinds(), apiextensions.Kinds(), policy.Kinds(), rbac.Kinds(), authentication.Kinds(), certificates.Kinds(), storage.Kinds()} {
		out = append(out, group...)
	}
	return out
}

// New returns a new registry of the built-in kinds. Each call returns its
// own registry (main passes one to the apiserver and the controllers). It
// panics if two built-in kinds collide, a programming error the tests
// catch.
func New() *registry.Registry {
	r, err := registry.New(Kinds()...)
	if err != nil {
		panic(err)
	}
	return r
}
