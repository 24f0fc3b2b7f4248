package core

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// ConfigMap is the configmaps kind: each data key is a valid config key
// (IsConfigMapKey), as Kubernetes' ValidateConfigMap.
func ConfigMap() registry.Kind {
	return registry.Kind{
		Resource: store.ConfigMaps,
		Columns: []metav1.TableColumnDefinition{registry.NameColumn,
			registry.Column("Data", "string", "The number of keys (data and binaryData).", 0),
			registry.AgeColumn},
		Row: func(obj store.Object) []any {
			x := obj.(*corev1.ConfigMap)
			return []any{x.Name, int64(len(x.Data) + len(x.BinaryData)), registry.Age(obj)}
		},
		Validate: func(obj store.Object) field.ErrorList {
			var errs field.ErrorList
			for k := range obj.(*corev1.ConfigMap).Data {
				for _, msg := range validation.IsConfigMapKey(k) {
					errs = append(errs, field.Invalid(field.NewPath("data").Key(k), k, msg))
				}
			}
			return errs
		},
	}
}
