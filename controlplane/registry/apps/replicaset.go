package apps

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

// ReplicaSet is the replicasets kind, as pkg/registry/apps/replicaset:
// 1 replica by default, the selector immutable, generation following spec
// changes, selectable by status.replicas, a scale subresource.
func ReplicaSet() registry.Kind {
	return registry.Kind{
		Resource:   store.ReplicaSets,
		Categories: []string{"all"},
		Status:     true,
		Scale: &registry.Scale{
			Get: func(obj store.Object) (int32, int32, string) {
				o := obj.(*appsv1.ReplicaSet)
				return replicas(o.Spec.Replicas), o.Status.Replicas, selectorString(o.Spec.Selector, "")
			},
			Set: func(obj store.Object, n int32) { obj.(*appsv1.ReplicaSet).Spec.Replicas = &n },
		},
		Generation: true,
		Default: func(obj store.Object) {
			o := obj.(*appsv1.ReplicaSet)
			if o.Spec.Replicas == nil {
				o.Spec.Replicas = new(int32(1))
			}
			core.DefaultPodSpec(&o.Spec.Template.Spec)
		},
		PrepareForCreate: func(obj store.Object) {
			obj.(*appsv1.ReplicaSet).Status = appsv1.ReplicaSetStatus{}
		},
		Validate: func(obj store.Object) field.ErrorList {
			o := obj.(*appsv1.ReplicaSet)
			return validateWorkload(o.Spec.Replicas, o.Spec.Selector, &o.Spec.Template, field.NewPath("spec"))
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			return apivalidation.ValidateImmutableField(obj.(*appsv1.ReplicaSet).Spec.Selector, old.(*appsv1.ReplicaSet).Spec.Selector, field.NewPath("spec", "selector"))
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn, registry.Column("Desired", "integer", "Number of desired pods.", 0),
			registry.Column("Current", "integer", "Number of actual replicas.", 0), registry.Column("Ready", "integer", "The number of ready replicas.", 0), registry.AgeColumn,
			registry.Column("Containers", "string", "Names of each container in the template.", 1), registry.Column("Images", "string", "Images referenced by each container in the template.", 1),
			registry.Column("Selector", "string", "Label selector for pods.", 1)},
		Row: func(obj store.Object) []any {
			x := obj.(*appsv1.ReplicaSet)
			names, images := containerCols(&x.Spec.Template)
			return []any{x.Name, replicas(x.Spec.Replicas), x.Status.Replicas, x.Status.ReadyReplicas, registry.Age(obj), names, images, selectorString(x.Spec.Selector, "<none>")}
		},
		Fields: func(obj store.Object) fields.Set {
			return fields.Set{"status.replicas": fmt.Sprint(obj.(*appsv1.ReplicaSet).Status.Replicas)}
		},
	}
}
