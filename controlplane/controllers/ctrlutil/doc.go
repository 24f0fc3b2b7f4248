// Package ctrlutil holds what orca's controllers share: pod deletion
// through the registry (DeletePod), pod readiness helpers ported from
// Kubernetes' podutil, ownership claiming (adopt/release, as
// kube-controller-manager's ControllerRefManager), the expectations of
// pod creations, deletions and writes a controller waits to see
// (Expectations, as ControllerExpectations) and the worker loop around a
// client-go rate-limited workqueue.
//
// It is a subpackage, not package controllers itself, because the
// controllers' Manager imports every controller package.
package ctrlutil
