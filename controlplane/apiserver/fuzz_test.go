package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/labstack/echo/v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
)

// The request decoders under fuzzing: bodies of every media type, list
// query parameters, and request paths. Their seed corpora are in
// testdata/fuzz/<Name>; `make fuzz` runs each for a bounded time.
// The invariant everywhere: no panic, and every error is a Status with a
// 4xx code (bad input is the client's fault, never a 500).

// fuzzServer is a Server with what the decoders need and no store.
func fuzzServer(t testing.TB) *Server {
	reg := builtin.New()
	pb, err := newProtobufDecoder(reg)
	if err != nil {
		t.Fatal(err)
	}
	return &Server{cfg: Config{MaxBodyBytes: 3 << 20}, pb: pb, reg: reg, fields: newFieldManagers(reg)}
}

// want4xx fails unless err is nil or a Status with a 4xx code.
func want4xx(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		t.Fatalf("%s: error is not a Status: %v", what, err)
	}
	if c := se.Status().Code; c < 400 || c > 499 {
		t.Fatalf("%s: code %d, want 4xx: %v", what, c, err)
	}
}

var fuzzMediaTypes = []string{"application/json", "application/yaml", protobufMediaType, "text/plain", ""}

func FuzzDecodeBody(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i"}]}}`,
		`{"metadata":{"name":"a","name":"b"}}`,
		"metadata:\n  name: a\n  name: b\n",
		`{"kind":"Secret","data":{"k":"!!"}}`,
		"\x6b\x38\x73\x00\x0a\x04",
		`[1,2,3]`, `null`, `{"metadata":{"labels":{"a":1}}}`,
	} {
		for i := range fuzzMediaTypes {
			f.Add([]byte(seed), uint8(i), uint8(0))
		}
	}
	s := fuzzServer(f)
	e := echo.New()
	f.Fuzz(func(t *testing.T, body []byte, mt, kind uint8) {
		kinds := s.reg.All()
		k := kinds[int(kind)%len(kinds)]
		r := k.Resource
		req := httptest.NewRequest(http.MethodPost, "/api/v1/x?fieldValidation=Strict", bytes.NewReader(body))
		if ct := fuzzMediaTypes[int(mt)%len(fuzzMediaTypes)]; ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		c := e.NewContext(req, httptest.NewRecorder())
		data, err := s.bodyJSON(c)
		want4xx(t, "bodyJSON", err)
		if err != nil {
			return
		}
		obj, err := decodeObject(r, data)
		want4xx(t, "decodeObject", err)
		want4xx(t, "checkStrict", checkStrict(c, k, data))
		if err == nil {
			_ = registry.ValidateCreate(k, obj) // must not panic on anything that decoded
		}
	})
}

func FuzzListOptions(f *testing.F) {
	for _, seed := range []string{
		"watch=true&resourceVersion=10&timeoutSeconds=5&allowWatchBookmarks=true",
		"watch=maybe", "labelSelector=app%20in%20(a,b),!x", "fieldSelector=spec.nodeName%3Dn,metadata.name!%3Dx",
		"sendInitialEvents=true&resourceVersionMatch=NotOlderThan&watch=1", "limit=-1&continue=%00", "resourceVersion=18446744073709551616",
		"timeoutSeconds=99999999999999999999", "labelSelector=a%3D%3D%3D",
	} {
		f.Add(seed, false)
	}
	podKind, _ := builtin.New().ForResource(store.Pods)
	f.Fuzz(func(t *testing.T, raw string, watch bool) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		_, sel, err := listOptions(podKind, q, watch)
		want4xx(t, "listOptions", err)
		if err == nil {
			sel.matches(store.Pods.New()) // a parsed selector can be evaluated
		}
		_, err = getOptions(q)
		want4xx(t, "getOptions", err)
	})
}

func FuzzPath(f *testing.F) {
	for _, seed := range []string{
		"/api/v1/namespaces/default/pods/p/status", "/apis/apps/v1/watch/namespaces/a/deployments/d",
		"/api/v1/namespaces/%2E%2E/pods", "/api/v1/nodes/a%2Fb", "/apis/apps", "/api/v1/namespaces/x/pods/y/log/z",
		"/api//v1///pods", "/api/v1/namespaces/" + string(bytes.Repeat([]byte("a"), 300)) + "/pods/x",
	} {
		f.Add(seed)
	}
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, p string) {
		ri, disc, err := s.parsePath(p)
		want4xx(t, "parsePath", err)
		if err != nil || disc {
			return
		}
		if err := checkPathNames(ri); err != nil {
			want4xx(t, "checkPathNames", err)
			return
		}
		// What passes the path check fits a NATS key.
		if ri.name != "" {
			if k := store.Key(ri.namespace, ri.name); len(k) > store.MaxKeyBytes {
				t.Fatalf("path %q: key of %d bytes passed the checks", p, len(k))
			}
		}
	})
}

var fuzzPatchTypes = []types.PatchType{types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType}

func FuzzPatch(f *testing.F) {
	for _, seed := range []string{
		`[{"op":"replace","path":"/spec/replicas","value":3}]`,
		`[{"op":"copy","from":"/spec","path":"/spec/template/x"},{"op":"copy","from":"/spec","path":"/spec/template/y"}]`,
		`[{"op":"move","from":"/metadata","path":"/metadata/labels/a"}]`,
		`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"j"}]}}}}`,
		`{"metadata":{"uid":"other"}}`, `{"spec":{"$setElementOrder/containers":[{"name":"c"}]}}`,
		`{"spec":{"template":{"spec":{"containers":[{"$patch":"delete","name":"c"}]}}}}`, `[]`, `{}`, `null`,
	} {
		for i := range fuzzPatchTypes {
			f.Add([]byte(seed), uint8(i))
		}
	}
	cur := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default", UID: "u1", ResourceVersion: "7", Labels: map[string]string{"app": "d"}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "d"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "d"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}},
	}
	const limit = 64 << 10
	f.Fuzz(func(t *testing.T, patch []byte, pt uint8) {
		typ := fuzzPatchTypes[int(pt)%len(fuzzPatchTypes)]
		obj, err := patchObject(store.Deployments, typ, cur.DeepCopy(), patch, limit, func([]byte) error { return nil })
		want4xx(t, "patch "+string(typ), err)
		if err != nil {
			return
		}
		if b, _ := json.Marshal(obj); len(b) > limit+1024 {
			t.Fatalf("patched object is %d bytes, limit %d", len(b), limit)
		}
	})
}
