// Package batch holds the kinds of the batch/v1 API group (Job, CronJob),
// one file per kind, as Kubernetes' pkg/registry/batch/<kind>.
package batch

import "github.com/orca-edge/orca/controlplane/registry"

// Kinds returns the batch kinds in discovery order.
func Kinds() []registry.Kind { return []registry.Kind{Job(), CronJob()} }
