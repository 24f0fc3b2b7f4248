package apiserver

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// table renders objs as a meta.k8s.io Table, the server-side printing
// kubectl get asks for, with the kind's columns and rows
// (registry.Kind.TableColumns, TableRow: Kubernetes' own printers for the
// built-in kinds, NAME/AGE for the rest). includeObject is "None",
// "Object" or "Metadata" (default): what each row carries in its object
// field.
func (s *Server) table(k *registry.Kind, objs []store.Object, rv, version, includeObject string) *metav1.Table {
	if version == "" {
		version = "v1"
	}
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/" + version}}
	t.ResourceVersion = rv
	t.ColumnDefinitions = k.TableColumns()
	t.Rows = make([]metav1.TableRow, 0, len(objs))
	for _, o := range objs {
		row := metav1.TableRow{Cells: k.TableRow(o)}
		switch includeObject {
		case "None":
		case "Object":
			b, _ := json.Marshal(o)
			row.Object = runtime.RawExtension{Raw: b}
		default:
			pm := metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}}
			if m, ok := o.(metav1.ObjectMetaAccessor); ok {
				pm.ObjectMeta = *m.GetObjectMeta().(*metav1.ObjectMeta)
			}
			b, _ := json.Marshal(pm)
			row.Object = runtime.RawExtension{Raw: b}
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}
