package apiserver

import (
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/registrytest"
)

// A kind added to the registry while the server runs is served at once:
// discovery, OpenAPI, CRUD and field selectors; once removed, it is gone
// from all of them.
func TestKindAddedAtRunTime(t *testing.T) {
	e := newEnv(t)
	const coll = "/apis/example.com/v1/namespaces/default/widgets"
	if code, _ := e.do(http.MethodGet, coll, "", nil); code != http.StatusNotFound {
		t.Fatalf("GET before Add = %d", code)
	}
	if _, out := e.do(http.MethodGet, "/openapi/v2", "", nil); strings.Contains(string(out), "/widgets") {
		t.Fatal("OpenAPI has widgets before Add")
	}
	widgets := registrytest.Widgets("v1")
	if err := e.srv.reg.Add(registry.Kind{Resource: widgets, Categories: []string{"all"}}); err != nil {
		t.Fatal(err)
	}
	if code, out := e.do(http.MethodGet, "/apis", "", nil); code != http.StatusOK || !strings.Contains(string(out), `"name":"example.com"`) {
		t.Errorf("GET /apis = %d %s", code, out)
	}
	v2 := widgets
	v2.Version = "v2"
	if err := e.srv.reg.Add(registry.Kind{Resource: v2}); err != nil {
		t.Fatal(err)
	}
	if code, out := e.do(http.MethodGet, "/apis/example.com", "", nil); code != http.StatusOK ||
		!strings.Contains(string(out), `"versions":[{"groupVersion":"example.com/v1","version":"v1"},{"groupVersion":"example.com/v2","version":"v2"}],"preferredVersion":{"groupVersion":"example.com/v1"`) {
		t.Errorf("GET /apis/example.com = %d %s", code, out)
	}
	if code, out := e.do(http.MethodGet, "/apis/example.com/v1", "", nil); code != http.StatusOK || !strings.Contains(string(out), `"name":"widgets"`) || !strings.Contains(string(out), `"wd"`) {
		t.Errorf("discovery = %d %s", code, out)
	}
	if _, out := e.do(http.MethodGet, "/openapi/v2", "", nil); !strings.Contains(string(out), "/apis/example.com/v1/namespaces/{namespace}/widgets") {
		t.Error("OpenAPI lacks widgets after Add")
	}
	if code, out := e.do(http.MethodPost, coll, "application/json", `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"data":{"a":"b"}}`); code != http.StatusCreated {
		t.Fatalf("POST = %d %s", code, out)
	}
	if code, out := e.do(http.MethodGet, coll+"?fieldSelector=metadata.name%3Dw", "", nil); code != http.StatusOK || !strings.Contains(string(out), `"kind":"WidgetList"`) || !strings.Contains(string(out), `"a":"b"`) {
		t.Errorf("list = %d %s", code, out)
	}
	if code, _ := e.do(http.MethodGet, coll+"?fieldSelector=spec.x%3Dy", "", nil); code != http.StatusBadRequest {
		t.Errorf("unsupported field selector = %d", code)
	}
	for _, v := range []string{"v1", "v2"} {
		e.srv.reg.Remove(schema.GroupVersionResource{Group: "example.com", Version: v, Resource: "widgets"})
	}
	if code, _ := e.do(http.MethodGet, coll, "", nil); code != http.StatusNotFound {
		t.Errorf("GET after Remove = %d", code)
	}
	if _, out := e.do(http.MethodGet, "/openapi/v2", "", nil); strings.Contains(string(out), "/widgets") {
		t.Error("OpenAPI has widgets after Remove")
	}
}
