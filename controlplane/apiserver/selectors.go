package apiserver

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/orca-edge/orca/controlplane/store"
)

// selector is a parsed labelSelector and fieldSelector pair.
type selector struct {
	label labels.Selector
	field fields.Selector
}

// empty reports whether the selector matches everything.
func (s selector) empty() bool { return s.label.Empty() && s.field.Empty() }

func (s selector) matches(obj store.Object) bool {
	return s.label.Matches(labels.Set(obj.GetLabels())) && s.field.Matches(fieldSet(obj))
}

// checkFieldSelector fails with a 400 when fs names a field the kind does
// not support, as in Kubernetes ("field label not supported").
func checkFieldSelector(r store.Resource, fs fields.Selector) error {
	supported := fieldSet(r.New())
	for _, req := range fs.Requirements() {
		if _, ok := supported[req.Field]; !ok {
			return apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
		}
	}
	return nil
}

// fieldSet returns the fields an object can be selected by: metadata.name
// and metadata.namespace for every kind, plus the kind's own (as the
// Kubernetes registries' GetAttrs/ToSelectableFields).
func fieldSet(obj store.Object) fields.Set {
	set := fields.Set{"metadata.name": obj.GetName(), "metadata.namespace": obj.GetNamespace()}
	switch o := obj.(type) {
	case *corev1.Pod:
		set["spec.nodeName"] = o.Spec.NodeName
		set["spec.restartPolicy"] = string(o.Spec.RestartPolicy)
		set["spec.schedulerName"] = o.Spec.SchedulerName
		set["spec.serviceAccountName"] = o.Spec.ServiceAccountName
		set["spec.hostNetwork"] = fmt.Sprint(o.Spec.HostNetwork)
		set["status.phase"] = string(o.Status.Phase)
		set["status.podIP"] = o.Status.PodIP
		set["status.nominatedNodeName"] = o.Status.NominatedNodeName
	case *corev1.Node:
		set["spec.unschedulable"] = fmt.Sprint(o.Spec.Unschedulable)
	case *corev1.Namespace:
		set["status.phase"] = string(o.Status.Phase)
	case *corev1.Secret:
		set["type"] = string(o.Type)
	case *corev1.Event:
		set["involvedObject.kind"] = o.InvolvedObject.Kind
		set["involvedObject.namespace"] = o.InvolvedObject.Namespace
		set["involvedObject.name"] = o.InvolvedObject.Name
		set["involvedObject.uid"] = string(o.InvolvedObject.UID)
		set["involvedObject.apiVersion"] = o.InvolvedObject.APIVersion
		set["involvedObject.resourceVersion"] = o.InvolvedObject.ResourceVersion
		set["involvedObject.fieldPath"] = o.InvolvedObject.FieldPath
		set["reason"] = o.Reason
		set["reportingComponent"] = o.ReportingController
		set["source"] = o.Source.Component
		set["type"] = o.Type
	case *corev1.Service:
		set["spec.clusterIP"] = o.Spec.ClusterIP
		set["spec.type"] = string(o.Spec.Type)
	case *appsv1.ReplicaSet:
		set["status.replicas"] = fmt.Sprint(o.Status.Replicas)
	}
	return set
}
