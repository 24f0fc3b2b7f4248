// Package node holds the kinds of the node.k8s.io/v1 API group, one file
// per kind.
package node

import (
	nodev1 "k8s.io/api/node/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

// Kinds returns the node kinds in discovery order.
func Kinds() []registry.Kind { return []registry.Kind{RuntimeClass()} }

// RuntimeClass is the runtimeclasses kind, as pkg/apis/node/validation:
// the handler is a DNS-1123 label and immutable; the overhead's resources
// are valid.
func RuntimeClass() registry.Kind {
	return registry.Kind{
		Resource: store.RuntimeClasses,
		Validate: func(obj store.Object) field.ErrorList {
			o := obj.(*nodev1.RuntimeClass)
			var errs field.ErrorList
			for _, msg := range validation.IsDNS1123Label(o.Handler) {
				errs = append(errs, field.Invalid(field.NewPath("handler"), o.Handler, msg))
			}
			if o.Overhead != nil {
				errs = append(errs, core.ValidateResourceList(o.Overhead.PodFixed, field.NewPath("overhead", "podFixed"))...)
			}
			return errs
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			return apivalidation.ValidateImmutableField(obj.(*nodev1.RuntimeClass).Handler, old.(*nodev1.RuntimeClass).Handler, field.NewPath("handler"))
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn, registry.Column("Handler", "string", "The handler of the runtime class.", 0), registry.AgeColumn},
		Row: func(obj store.Object) []any {
			x := obj.(*nodev1.RuntimeClass)
			return []any{x.Name, x.Handler, registry.Age(obj)}
		},
	}
}
