package apps

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// ControllerRevisions is the storage layout of apps/v1 ControllerRevisions:
// bucket "controllerrevisions", keys "<namespace>.<name>". The DaemonSet
// and StatefulSet controllers keep their template history in them.
var ControllerRevisions = store.Resource{Group: "apps", Version: "v1", Kind: "ControllerRevision", ListKind: "ControllerRevisionList",
	Plural: "controllerrevisions", Singular: "controllerrevision", Namespaced: true,
	New:     func() store.Object { return &appsv1.ControllerRevision{} },
	NewList: func() runtime.Object { return &appsv1.ControllerRevisionList{} }}

// ControllerRevision is the controllerrevisions kind, as Kubernetes'
// pkg/registry/apps/controllerrevision and ValidateControllerRevision /
// ValidateControllerRevisionUpdate: data is required and immutable,
// revision is non-negative (and may change: a rollback renumbers a
// revision); no status, no generation. Columns as kubectl's: NAME,
// CONTROLLER ("<kind>.<group>/<name>" of the controller ownerReference, or
// <none>), REVISION, AGE.
func ControllerRevision() registry.Kind {
	return registry.Kind{
		Resource: ControllerRevisions,
		Validate: func(obj store.Object) field.ErrorList {
			o := obj.(*appsv1.ControllerRevision)
			var errs field.ErrorList
			if o.Data.Raw == nil && o.Data.Object == nil {
				errs = append(errs, field.Required(field.NewPath("data"), "data is mandatory"))
			}
			errs = append(errs, apivalidation.ValidateNonnegativeField(o.Revision, field.NewPath("revision"))...)
			return errs
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			n, o := obj.(*appsv1.ControllerRevision), old.(*appsv1.ControllerRevision)
			return apivalidation.ValidateImmutableField(n.Data, o.Data, field.NewPath("data"))
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn,
			registry.Column("Controller", "string", "Controller of the object", 0),
			registry.Column("Revision", "integer", "Revision of the ControllerRevision", 0), registry.AgeColumn},
		Row: func(obj store.Object) []any {
			o := obj.(*appsv1.ControllerRevision)
			return []any{o.Name, revisionController(o), o.Revision, registry.Age(obj)}
		},
	}
}

// revisionController is kubectl's CONTROLLER cell of a ControllerRevision.
func revisionController(o *appsv1.ControllerRevision) string {
	ref := metav1.GetControllerOfNoCopy(o)
	if ref == nil {
		return "<none>"
	}
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	return strings.ToLower(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}.String()) + "/" + ref.Name
}
