package apiserver

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/orca-edge/orca/controlplane/store"
)

// orca serves a minimal OpenAPI v3: the discovery root (/openapi/v3) and
// one document per group version that lists each resource's paths with
// their x-kubernetes-group-version-kind and the fieldValidation query
// parameter, and no schemas. That is what kubectl's default --validate
// (Strict) looks for (cli-runtime QueryParamVerifierV3): finding the
// parameter, it leaves validation to the server with
// ?fieldValidation=Strict instead of downloading schemas. kubectl apply
// then computes strategic merge patches from the compiled-in Go types.
// /openapi/v2 stays 404 and `kubectl explain` does not work.

// openAPIDocs returns the group-version documents keyed "api/v1",
// "apis/apps/v1", ... .
func openAPIDocs() map[string][]byte {
	type gvk struct {
		Group   string `json:"group"`
		Version string `json:"version"`
		Kind    string `json:"kind"`
	}
	type param struct {
		Name   string            `json:"name"`
		In     string            `json:"in"`
		Schema map[string]string `json:"schema"`
	}
	params := []param{{Name: "fieldValidation", In: "query", Schema: map[string]string{"type": "string"}},
		{Name: "dryRun", In: "query", Schema: map[string]string{"type": "string"}},
		{Name: "fieldManager", In: "query", Schema: map[string]string{"type": "string"}}}
	docs := map[string]map[string]any{}
	for _, r := range store.All {
		key := "apis/" + r.APIVersion()
		if r.Group == "" {
			key = "api/" + r.Version
		}
		doc, ok := docs[key]
		if !ok {
			doc = map[string]any{"openapi": "3.0.0", "info": map[string]string{"title": "orca", "version": GitVersion}, "paths": map[string]any{}}
			docs[key] = doc
		}
		base := "/" + key + "/"
		if r.Namespaced {
			base += "namespaces/{namespace}/"
		}
		ext := gvk{Group: r.Group, Version: r.Version, Kind: r.Kind}
		op := func(action string) map[string]any {
			return map[string]any{"x-kubernetes-action": action, "x-kubernetes-group-version-kind": ext, "parameters": params,
				"responses": map[string]any{"200": map[string]string{"description": "OK"}}}
		}
		paths := doc["paths"].(map[string]any)
		paths[base+r.Plural] = map[string]any{"get": op("list"), "post": op("post")}
		paths[base+r.Plural+"/{name}"] = map[string]any{"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")}
	}
	out := map[string][]byte{}
	for k, d := range docs {
		b, _ := json.Marshal(d)
		out[k] = b
	}
	return out
}

// openAPIRoot answers /openapi/v3 with the group versions' relative URLs,
// each carrying a content hash as Kubernetes' does (kubectl caches by it).
func (s *Server) openAPIRoot(c echo.Context) error {
	paths := map[string]any{}
	for k, b := range openAPIDocs() {
		paths[k] = map[string]string{"serverRelativeURL": fmt.Sprintf("/openapi/v3/%s?hash=%X", k, sha256.Sum256(b))}
	}
	return writeJSON(c, http.StatusOK, map[string]any{"paths": paths})
}

// openAPIGroupVersion answers /openapi/v3/api/v1 and /openapi/v3/apis/<g>/<v>.
func (s *Server) openAPIGroupVersion(c echo.Context) error {
	key := strings.Trim(strings.TrimPrefix(c.Request().URL.Path, "/openapi/v3/"), "/")
	b, ok := openAPIDocs()[key]
	if !ok {
		return notFoundPath(c.Request().URL.Path)
	}
	return c.JSONBlob(http.StatusOK, b)
}
