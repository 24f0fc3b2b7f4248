package apiserver

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// selector is a parsed labelSelector and fieldSelector pair, with the
// kind's selectable fields (registry.Kind.FieldSet).
type selector struct {
	label  labels.Selector
	field  fields.Selector
	fields func(store.Object) fields.Set
}

// empty reports whether the selector matches everything.
func (s selector) empty() bool { return s.label.Empty() && s.field.Empty() }

func (s selector) matches(obj store.Object) bool {
	if !s.label.Matches(labels.Set(obj.GetLabels())) {
		return false
	}
	return s.field.Empty() || s.field.Matches(s.fields(obj))
}

// checkFieldSelector fails with a 400 when fs names a field the kind does
// not support, as in Kubernetes ("field label not supported").
func checkFieldSelector(k *registry.Kind, fs fields.Selector) error {
	supported := k.FieldSet(k.New())
	for _, req := range fs.Requirements() {
		if _, ok := supported[req.Field]; !ok {
			return apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
		}
	}
	return nil
}
