package registry

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/orca-edge/orca/controlplane/apiserver/openapidefs"
)

// CustomResourceTypeConverter returns the Kind.TypeConverter of the custom
// resource kind gvk from the structural schema of its CRD version (its
// openAPIV3Schema as a kube-openapi spec.Schema, x-kubernetes-list-type,
// -list-map-keys, -map-type and -preserve-unknown-fields included), as
// apiextensions-apiserver builds it: metadata is Kubernetes' ObjectMeta
// whatever the schema says, apiVersion and kind are strings, and
// preserveUnknownFields (the CRD's x-kubernetes-preserve-unknown-fields
// at the root) keeps fields the schema does not declare. A nil schema
// gives managedfields.NewDeducedTypeConverter(). An error means the
// schema is not structural.
func CustomResourceTypeConverter(gvk schema.GroupVersionKind, crSchema *spec.Schema, preserveUnknownFields bool) (managedfields.TypeConverter, error) {
	if crSchema == nil {
		return managedfields.NewDeducedTypeConverter(), nil
	}
	objectMeta := metav1.ObjectMeta{}.OpenAPIModelName()
	models, err := builder3.BuildOpenAPIDefinitionsForResources(&common.OpenAPIV3Config{
		Info: &spec.Info{}, GetDefinitions: openapidefs.GetOpenAPIDefinitions,
	}, objectMeta)
	if err != nil {
		return nil, err
	}
	s := *crSchema
	s.Properties = make(map[string]spec.Schema, len(crSchema.Properties)+3)
	for k, v := range crSchema.Properties {
		s.Properties[k] = v
	}
	str := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}}}
	s.Properties["apiVersion"], s.Properties["kind"] = str, str
	s.Properties["metadata"] = spec.Schema{SchemaProps: spec.SchemaProps{Ref: spec.MustCreateRef("#/components/schemas/" + objectMeta)}}
	s.Type = []string{"object"}
	s.Extensions = spec.Extensions{}
	for k, v := range crSchema.Extensions {
		s.Extensions[k] = v
	}
	s.Extensions["x-kubernetes-group-version-kind"] = []any{map[string]any{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind}}
	models[gvk.Group+"."+gvk.Version+"."+gvk.Kind] = &s
	return managedfields.NewTypeConverter(models, preserveUnknownFields)
}
