package ctrlutil

import (
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TemplateSelector returns a workload's spec.selector as a
// labels.Selector, or an error when it is unset, invalid, empty (it would
// select every pod) or does not match the labels of the pod template
// (the pods made would not be selected). The apiserver refuses such a
// ReplicaSet, DaemonSet, StatefulSet or Deployment, but one written to
// the store directly may hold it, and its controller must leave it alone.
func TemplateSelector(sel *metav1.LabelSelector, template map[string]string) (labels.Selector, error) {
	if sel == nil {
		return nil, errors.New("no selector")
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	switch {
	case err != nil:
		return nil, err
	case s.Empty():
		return nil, errors.New("empty selector")
	case !s.Matches(labels.Set(template)):
		return nil, fmt.Errorf("selector does not match the template's labels %v", template)
	}
	return s, nil
}
