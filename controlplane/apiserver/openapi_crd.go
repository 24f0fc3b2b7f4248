package apiserver

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// customResourceModel names the definition of a custom resource kind as
// the Kubernetes apiextensions-apiserver does: the group reversed, then
// version and kind ("com.example.stable.v1.CronTab").
func customResourceModel(group, version, kind string) string {
	parts := strings.Split(group, ".")
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, ".") + "." + version + "." + kind
}

// customResourceDefinitions returns the OpenAPI definitions of the custom
// resource kinds among kinds, as the apiextensions-apiserver's OpenAPI
// builder: the CRD version's schema with apiVersion, kind and metadata (a
// reference to ObjectMeta) completed, and its <Kind>List.
func customResourceDefinitions(kinds []openAPIKind, ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	objectMeta, listMeta := metav1.ObjectMeta{}.OpenAPIModelName(), metav1.ListMeta{}.OpenAPIModelName()
	str := func(desc string) spec.Schema {
		return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}, Description: desc}}
	}
	apiVersion := str("APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources")
	kind := str("Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds")
	out := map[string]common.OpenAPIDefinition{}
	for _, k := range kinds {
		if k.schema == nil {
			continue
		}
		s := *k.schema
		props := make(map[string]spec.Schema, len(s.Properties)+3)
		for n, p := range s.Properties {
			props[n] = p
		}
		props["apiVersion"], props["kind"] = apiVersion, kind
		props["metadata"] = spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(objectMeta), Description: "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}}
		s.Properties = props
		s.Type = []string{"object"}
		out[k.model] = common.OpenAPIDefinition{Schema: s, Dependencies: []string{objectMeta}}
		out[k.listModel] = common.OpenAPIDefinition{Schema: spec.Schema{SchemaProps: spec.SchemaProps{
			Type: []string{"object"}, Description: k.kind + "List is a list of " + k.kind, Required: []string{"items"},
			Properties: map[string]spec.Schema{
				"apiVersion": apiVersion, "kind": kind,
				"metadata": {SchemaProps: spec.SchemaProps{Ref: ref(listMeta), Description: "Standard list metadata."}},
				"items": {SchemaProps: spec.SchemaProps{Type: []string{"array"}, Description: "List of " + k.plural + ".",
					Items: &spec.SchemaOrArray{Schema: &spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(k.model)}}}}},
			},
		}}, Dependencies: []string{listMeta, k.model}}
	}
	return out
}
