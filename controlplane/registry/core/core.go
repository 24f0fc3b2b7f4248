// Package core holds the kinds of the core API group ("", v1), one file
// per kind, as Kubernetes' pkg/registry/core/<kind>/strategy.go, and the
// pod spec rules the workload kinds of other groups share (podspec.go,
// volumes.go).
package core

import "github.com/orca-edge/orca/controlplane/registry"

// Kinds returns the core kinds in discovery order.
func Kinds() []registry.Kind {
	return []registry.Kind{Namespace(), Node(), Pod(), Service(), Endpoints(), ConfigMap(), Secret(), ServiceAccount(), Event(), PersistentVolume(), PersistentVolumeClaim(), ResourceQuota(), LimitRange()}
}
