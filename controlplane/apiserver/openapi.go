package apiserver

import (
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/openapiconv"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/orca-edge/orca/controlplane/apiserver/openapidefs"
	"github.com/orca-edge/orca/controlplane/registry"
)

// OpenAPI, as the Kubernetes apiserver serves it:
//
//   - GET /openapi/v2: one Swagger 2.0 document with every served kind's
//     paths and definitions, as JSON or, for
//     Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf,
//     as gnostic protobuf; with an ETag (kube-openapi's handler). kubectl
//     1.27/1.28 validate client-side against it and find patch strategies
//     in it.
//   - GET /openapi/v3: the discovery root, each group version's
//     serverRelativeURL carrying ?hash=<etag>; GET /openapi/v3/api/v1 and
//     /openapi/v3/apis/<group>/<version>: that group version's paths and
//     components.schemas (kube-openapi's handler3, JSON or protobuf).
//     kubectl explain and newer kubectls read these.
//
// Definitions are kube-openapi's generated ones for the k8s.io/api and
// apimachinery types (package openapidefs) plus hand-built ones for the
// orca.dev kinds; each served kind's definition and every operation carry
// x-kubernetes-group-version-kind. Every patch operation lists the
// fieldValidation query parameter, which kubectl's --validate detection
// (cli-runtime QueryParamVerifier, v2 and v3) looks for before sending
// ?fieldValidation=Strict. The documents are built once per process, on
// first request, and do not change.

// orcaKinds are the orca.dev/v1 kinds: plural, kind. They are
// cluster-scoped and served get, list and update (PUT of the artifact).
var orcaKinds = []struct{ plural, kind, about string }{
	{"wasmmodules", "WasmModule", "a tag of a WASM module pushed with `orca wasm push`"},
	{"images", "ContainerImage", "a reference of an OCI image pushed with `orca image push`"},
}

// orcaModelPrefix names orca.dev definitions (as io.k8s.api.core.v1. does
// Kubernetes' own).
const orcaModelPrefix = "dev.orca.v1."

// orcaDefinitions returns the OpenAPI definitions of the orca.dev kinds
// (WasmModule and ContainerImage with their Spec and List), whose Go types
// are WasmModule and ContainerImage in this package.
func orcaDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	str := func(desc string) spec.Schema {
		return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}, Description: desc}}
	}
	refSchema := func(name, desc string) spec.Schema {
		return spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(name), Description: desc}}
	}
	typeMeta := func(props map[string]spec.Schema) map[string]spec.Schema {
		props["apiVersion"] = str("APIVersion defines the versioned schema of this representation of an object (orca.dev/v1).")
		props["kind"] = str("Kind is a string value representing the REST resource this object represents.")
		return props
	}
	objectMeta, listMeta := metav1.ObjectMeta{}.OpenAPIModelName(), metav1.ListMeta{}.OpenAPIModelName()
	out := map[string]common.OpenAPIDefinition{}
	for _, k := range orcaKinds {
		name := orcaModelPrefix + k.kind
		out[name+"Spec"] = common.OpenAPIDefinition{Schema: spec.Schema{SchemaProps: spec.SchemaProps{
			Type: []string{"object"}, Description: k.kind + "Spec is what " + k.about + " points at.",
			Properties: map[string]spec.Schema{
				"digest": str("Digest of the content, \"sha256:<hex>\"."),
				"size":   {SchemaProps: spec.SchemaProps{Type: []string{"integer"}, Format: "int64", Description: "Size of the content in bytes."}},
			},
		}}}
		out[name] = common.OpenAPIDefinition{Schema: spec.Schema{SchemaProps: spec.SchemaProps{
			Type: []string{"object"}, Description: k.kind + " is " + k.about + ". Its name is the reference.",
			Properties: typeMeta(map[string]spec.Schema{
				"metadata": refSchema(objectMeta, "Standard object's metadata."),
				"spec":     refSchema(name+"Spec", "What the reference points at."),
			}),
		}}, Dependencies: []string{objectMeta, name + "Spec"}}
		out[name+"List"] = common.OpenAPIDefinition{Schema: spec.Schema{SchemaProps: spec.SchemaProps{
			Type: []string{"object"}, Description: k.kind + "List is a list of " + k.kind + ".", Required: []string{"items"},
			Properties: typeMeta(map[string]spec.Schema{
				"metadata": refSchema(listMeta, "Standard list metadata."),
				"items": {SchemaProps: spec.SchemaProps{Type: []string{"array"}, Description: "Items is the list of " + k.kind + ".",
					Items: &spec.SchemaOrArray{Schema: &spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(name)}}}}},
			}),
		}}, Dependencies: []string{listMeta, name}}
	}
	return out
}

// openAPIKind is one served kind as the OpenAPI documents describe it.
type openAPIKind struct {
	group, version, kind, plural string
	namespaced, orca             bool
	model, listModel             string       // definition names
	schema                       *spec.Schema // a custom resource's (registry.Kind.OpenAPISchema)
}

func (k openAPIKind) gvKey() string {
	if k.group == "" {
		return "api/" + k.version
	}
	return "apis/" + k.group + "/" + k.version
}

func hasModelName(o any) bool {
	_, ok := o.(interface{ OpenAPIModelName() string })
	return ok
}

func modelName(o any) string {
	return o.(interface{ OpenAPIModelName() string }).OpenAPIModelName()
}

// openAPIKinds lists the registry's kinds that have generated
// definitions (their Go type has OpenAPIModelName: every k8s.io/api type)
// or a schema of their own (custom resources), and the orca.dev kinds.
func openAPIKinds(reg *registry.Registry) []openAPIKind {
	var out []openAPIKind
	for _, r := range reg.All() {
		if r.OpenAPISchema != nil {
			model := customResourceModel(r.Group, r.Version, r.Kind)
			out = append(out, openAPIKind{group: r.Group, version: r.Version, kind: r.Kind, plural: r.Plural, namespaced: r.Namespaced,
				model: model, listModel: model + "List", schema: r.OpenAPISchema})
			continue
		}
		if !hasModelName(r.New()) || !hasModelName(r.NewList()) {
			continue
		}
		out = append(out, openAPIKind{group: r.Group, version: r.Version, kind: r.Kind, plural: r.Plural, namespaced: r.Namespaced,
			model: modelName(r.New()), listModel: modelName(r.NewList())})
	}
	for _, k := range orcaKinds {
		out = append(out, openAPIKind{group: orcaGroup, version: "v1", kind: k.kind, plural: k.plural, orca: true,
			model: orcaModelPrefix + k.kind, listModel: orcaModelPrefix + k.kind + "List"})
	}
	return out
}

func gvkExtension(group, version, kind string) map[string]any {
	return map[string]any{"group": group, "version": version, "kind": kind}
}

// openAPIConfig returns the builder's configuration: generated plus orca
// definitions, and the names' x-kubernetes-group-version-kind extensions
// (Kubernetes' DefinitionNamer).
func openAPIConfig(kinds []openAPIKind) *common.Config {
	gvks := map[string][]any{}
	for _, k := range kinds {
		gvks[k.model] = append(gvks[k.model], gvkExtension(k.group, k.version, k.kind))
		gvks[k.listModel] = append(gvks[k.listModel], gvkExtension(k.group, k.version, k.kind+"List"))
	}
	statusModel := metav1.Status{}.OpenAPIModelName()
	gvks[statusModel] = append(gvks[statusModel], gvkExtension("", "v1", "Status"))
	return &common.Config{
		Info: &spec.Info{InfoProps: spec.InfoProps{Title: "orca", Version: GitVersion}},
		GetDefinitions: func(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
			defs := openapidefs.GetOpenAPIDefinitions(ref)
			for n, d := range orcaDefinitions(ref) {
				defs[n] = d
			}
			for n, d := range customResourceDefinitions(kinds, ref) {
				defs[n] = d
			}
			return defs
		},
		GetDefinitionName: func(name string) (string, spec.Extensions) {
			if g, ok := gvks[name]; ok {
				return name, spec.Extensions{"x-kubernetes-group-version-kind": g}
			}
			return name, nil
		},
	}
}

func queryParam(name, desc string) spec.Parameter {
	return spec.Parameter{ParamProps: spec.ParamProps{Name: name, In: "query", Description: desc}, SimpleSchema: spec.SimpleSchema{Type: "string"}}
}

func pathParam(name, desc string) spec.Parameter {
	return spec.Parameter{ParamProps: spec.ParamProps{Name: name, In: "path", Required: true, Description: desc}, SimpleSchema: spec.SimpleSchema{Type: "string"}}
}

func bodyParam(model string) spec.Parameter {
	return spec.Parameter{ParamProps: spec.ParamProps{Name: "body", In: "body", Required: true, Schema: spec.RefSchema("#/definitions/" + model)}}
}

var (
	fieldValidationParam = queryParam("fieldValidation", "How the server treats unknown or duplicate fields: Ignore, Warn or Strict (the default).")
	dryRunParam          = queryParam("dryRun", "When present (All), the request is validated but not persisted.")
	fieldManagerParam    = queryParam("fieldManager", "Name of the actor making the change.")
	listParams           = []spec.Parameter{queryParam("labelSelector", "Selects objects by label."), queryParam("fieldSelector", "Selects objects by field."),
		queryParam("limit", "Maximum number of objects to return."), queryParam("continue", "Continue token of a previous page."),
		queryParam("resourceVersion", "Resource version the list must be at least as new as."), queryParam("watch", "Watch for changes instead of listing.")}
	writeParams = []spec.Parameter{dryRunParam, fieldManagerParam, fieldValidationParam}
)

// openAPIPaths adds the kind's collection and object paths to sw.
func openAPIPaths(sw *spec.Swagger, k openAPIKind) {
	base := "/" + k.gvKey() + "/"
	var pathParams []spec.Parameter
	if k.namespaced {
		base += "namespaces/{namespace}/"
		pathParams = append(pathParams, pathParam("namespace", "Object name and auth scope, such as for teams and projects."))
	}
	op := func(id, action, respModel string, params []spec.Parameter) *spec.Operation {
		o := &spec.Operation{OperationProps: spec.OperationProps{ID: id + k.kind, Parameters: params,
			Consumes: []string{"application/json", "application/yaml"}, Produces: []string{"application/json", "application/yaml"}, Schemes: []string{"https", "http"},
			Responses: &spec.Responses{ResponsesProps: spec.ResponsesProps{StatusCodeResponses: map[int]spec.Response{
				http.StatusOK: {ResponseProps: spec.ResponseProps{Description: "OK", Schema: spec.RefSchema("#/definitions/" + respModel)}},
			}}}}}
		o.AddExtension("x-kubernetes-action", action)
		o.AddExtension("x-kubernetes-group-version-kind", gvkExtension(k.group, k.version, k.kind))
		return o
	}
	coll := spec.PathItem{PathItemProps: spec.PathItemProps{Parameters: pathParams, Get: op("list", "list", k.listModel, listParams)}}
	objParams := append([]spec.Parameter{pathParam("name", "Name of the "+k.kind+".")}, pathParams...)
	obj := spec.PathItem{PathItemProps: spec.PathItemProps{Parameters: objParams, Get: op("read", "get", k.model, nil)}}
	if k.orca {
		put := op("replace", "put", k.model, nil)
		put.Consumes = []string{"application/octet-stream"}
		obj.Put = put
	} else {
		coll.Post = op("create", "post", k.model, append([]spec.Parameter{bodyParam(k.model)}, writeParams...))
		obj.Put = op("replace", "put", k.model, append([]spec.Parameter{bodyParam(k.model)}, writeParams...))
		patch := op("patch", "patch", k.model, append([]spec.Parameter{bodyParam(metav1.Patch{}.OpenAPIModelName())}, writeParams...))
		patch.Parameters = append(patch.Parameters, queryParam("force", "Force is going to \"force\" Apply requests: re-acquire the fields owned by other managers."))
		patch.Consumes = []string{"application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml"}
		obj.Patch = patch
		del := op("delete", "delete", metav1.Status{}.OpenAPIModelName(), append([]spec.Parameter{bodyParam(metav1.DeleteOptions{}.OpenAPIModelName())}, dryRunParam))
		del.Parameters[0].Required = false
		obj.Delete = del
	}
	sw.Paths.Paths[base+k.plural] = coll
	sw.Paths.Paths[base+k.plural+"/{name}"] = obj
}

// buildOpenAPI builds the Swagger document of the given kinds (of all,
// for the names' group-version-kind extensions): their paths and every
// definition they reach.
func buildOpenAPI(cfg *common.Config, kinds []openAPIKind) (*spec.Swagger, error) {
	names := []string{metav1.Status{}.OpenAPIModelName(), metav1.Patch{}.OpenAPIModelName(), metav1.DeleteOptions{}.OpenAPIModelName()}
	for _, k := range kinds {
		names = append(names, k.model, k.listModel)
	}
	sw, err := builder.BuildOpenAPIDefinitionsForResources(cfg, names...)
	if err != nil {
		return nil, err
	}
	for _, k := range kinds {
		openAPIPaths(sw, k)
	}
	return sw, nil
}

// openAPIServices holds a server's OpenAPI documents, built at the first
// request after the registry changed (see Server.openAPI).
type openAPIServices struct {
	v2     http.Handler
	v3     *handler3.OpenAPIService
	gvKeys map[string]bool // "api/v1", "apis/apps/v1", ...
}

// openAPI returns the server's OpenAPI documents, rebuilt when the
// registry changed since they were built (a kind added or removed at run
// time). Concurrent first requests build them once.
func (s *Server) openAPI() (*openAPIServices, error) {
	s.openAPIMu.Lock()
	defer s.openAPIMu.Unlock()
	if s.openAPISvc != nil {
		select {
		case <-s.openAPIChanged:
		default:
			return s.openAPISvc, nil
		}
	}
	changed := s.reg.Changed() // taken before reading the kinds
	svc, err := buildOpenAPIServices(openAPIKinds(s.reg))
	if err != nil {
		return nil, err
	}
	s.openAPISvc, s.openAPIChanged = svc, changed
	return svc, nil
}

// buildOpenAPIServices builds the v2 document and one v3 document per
// group-version of kinds.
//
// The definitions of every model (built-in and custom resources) are
// computed once and shared by the v2 document and the v3 document of
// each group-version: computing them again per group-version made a
// build cost (group-versions x definitions), minutes for a CRD with a
// few hundred versions.
func buildOpenAPIServices(kinds []openAPIKind) (*openAPIServices, error) {
	cfg := openAPIConfig(kinds)
	defs := cfg.GetDefinitions
	var once sync.Once
	var cached map[string]common.OpenAPIDefinition
	// The builder only reads the definitions, and its ref callback
	// depends only on cfg.GetDefinitionName, the same for every build.
	cfg.GetDefinitions = func(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
		once.Do(func() { cached = defs(ref) })
		return cached
	}
	all, err := buildOpenAPI(cfg, kinds)
	if err != nil {
		return nil, err
	}
	var h pathHandler
	handler.NewOpenAPIService(all).RegisterOpenAPIVersionedService("/openapi/v2", &h)
	s := &openAPIServices{v2: h.h, v3: handler3.NewOpenAPIService(), gvKeys: map[string]bool{}}
	byGV := map[string][]openAPIKind{}
	for _, k := range kinds {
		byGV[k.gvKey()] = append(byGV[k.gvKey()], k)
	}
	keys := make([]string, 0, len(byGV))
	for key := range byGV {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		sw, err := buildOpenAPI(cfg, byGV[key])
		if err != nil {
			return nil, err
		}
		s.v3.UpdateGroupVersion(key, openapiconv.ConvertV2ToV3(sw))
		s.gvKeys[key] = true
	}
	return s, nil
}

// pathHandler captures the handler kube-openapi registers (common.PathHandler).
type pathHandler struct{ h http.Handler }

func (p *pathHandler) Handle(_ string, h http.Handler) { p.h = h }

// openAPIV2 answers /openapi/v2.
func (s *Server) openAPIV2(c echo.Context) error {
	svc, err := s.openAPI()
	if err != nil {
		return err
	}
	svc.v2.ServeHTTP(c.Response(), c.Request())
	return nil
}

// openAPIRoot answers /openapi/v3 with the group versions' relative URLs,
// each carrying a content hash as Kubernetes' does (kubectl caches by it).
func (s *Server) openAPIRoot(c echo.Context) error {
	svc, err := s.openAPI()
	if err != nil {
		return err
	}
	svc.v3.HandleDiscovery(c.Response(), c.Request())
	return nil
}

// openAPIGroupVersion answers /openapi/v3/api/v1 and /openapi/v3/apis/<g>/<v>.
func (s *Server) openAPIGroupVersion(c echo.Context) error {
	svc, err := s.openAPI()
	if err != nil {
		return err
	}
	key := strings.TrimPrefix(c.Request().URL.Path, "/openapi/v3/")
	if !svc.gvKeys[key] {
		return notFoundPath(c.Request().URL.Path)
	}
	svc.v3.HandleGroupVersion(c.Response(), c.Request())
	return nil
}
