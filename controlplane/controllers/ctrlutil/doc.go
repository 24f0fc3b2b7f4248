// Package ctrlutil holds what orca's controllers share: pod deletion
// through the registry (DeletePod), pod readiness helpers ported from
// Kubernetes' podutil, ownership claiming (adopt/release, as
// kube-controller-manager's ControllerRefManager), the expectations of
// pod creations, deletions and writes a controller waits to see
// (Expectations, as ControllerExpectations), finding a controller's
// owners from an ownerReference or a selector and the pod handlers built
// on it (Owners), the Services that select a pod (ServicePodHandler), a
// workload's selector checked against its template (TemplateSelector) and
// the worker loop around a client-go rate-limited workqueue.
//
// It is a subpackage, not package controllers itself, because the
// controllers' Manager imports every controller package.
package ctrlutil
