// Package autoscaling holds the kinds of the autoscaling API group
// (HorizontalPodAutoscaler), one file per kind, as Kubernetes'
// pkg/registry/autoscaling/<kind>.
package autoscaling

import "github.com/orca-edge/orca/controlplane/registry"

// Kinds returns the autoscaling kinds in discovery order.
func Kinds() []registry.Kind { return []registry.Kind{HorizontalPodAutoscaler()} }
