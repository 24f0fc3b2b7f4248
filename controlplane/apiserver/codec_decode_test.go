package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
)

// decodeChecked (one strict decode for the common body) gives the same
// object, error and Warning headers as decodeObject followed by
// checkStrict, whatever the body and ?fieldValidation=.
func TestDecodeCheckedMatchesDecodeAndCheckStrict(t *testing.T) {
	reg := builtin.New()
	pods, _ := reg.ForResource(store.Pods)
	cms, _ := reg.ForResource(store.ConfigMaps)
	pod := benchPod("ns", "p-01", map[string]string{"app": "x"})
	pod.Status.Phase = "Pending"
	good, _ := json.Marshal(pod)
	bodies := []struct {
		ri   reqInfo
		body string
	}{
		{reqInfo{kind: pods, res: store.Pods}, string(good)},
		{reqInfo{kind: pods, res: store.Pods}, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}`},
		{reqInfo{kind: pods, res: store.Pods}, `{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i"}]}}`},
		{reqInfo{kind: pods, res: store.Pods}, `{"kind":"Service","metadata":{"name":"a"}}`},
		{reqInfo{kind: pods, res: store.Pods}, `{"apiVersion":"apps/v1","metadata":{"name":"a"}}`},
		{reqInfo{kind: pods, res: store.Pods}, `{"apiVersion":"/v1","metadata":{"name":"a"}}`},
		{reqInfo{kind: pods, res: store.Pods}, `{"KIND":"Service","metadata":{"name":"a"}}`},
		{reqInfo{kind: pods, res: store.Pods}, `{"Metadata":{"name":"a"}}`},
		{reqInfo{kind: pods, res: store.Pods}, `{"metadata":{"name":"a","Labels":{"x":"y"}}}`},
		{reqInfo{kind: pods, res: store.Pods}, `{"metadata":{"name":"a"},"spec":{"bogus":1}}`},
		{reqInfo{kind: pods, res: store.Pods}, `{"metadata":{"name":"a"},"metadata":{"name":"b"}}`},
		{reqInfo{kind: pods, res: store.Pods}, `{"metadata":{"name":5}}`},
		{reqInfo{kind: pods, res: store.Pods}, `{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"x"}}}]}}`},
		{reqInfo{kind: cms, res: store.ConfigMaps}, `{"metadata":{"name":"a"},"data":{"k":"v","K":"w"}}`},
		{reqInfo{kind: cms, res: store.ConfigMaps}, `{"metadata":{"name":"a"},"data":{"k":"v","k":"w"}}`},
		{reqInfo{kind: cms, res: store.ConfigMaps}, `{"metadata":{"name":"a"},"binaryData":{"k":"aGk="}}`},
	}
	for _, mode := range []string{"", "Warn", "Strict", "Ignore", "bogus"} {
		for i, b := range bodies {
			t.Run(fmt.Sprintf("%s/%d", mode, i), func(t *testing.T) {
				newCtx := func() (echo.Context, *httptest.ResponseRecorder) {
					req := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/ns/pods?fieldValidation="+mode, strings.NewReader(b.body))
					rec := httptest.NewRecorder()
					return echo.New().NewContext(req, rec), rec
				}
				c1, rec1 := newCtx()
				var seen1 store.Object
				got, err1 := decodeChecked(c1, b.ri, []byte(b.body), func(o store.Object) { seen1 = o })

				c2, rec2 := newCtx()
				var seen2 store.Object
				want, err2 := decodeObject(b.ri.res, []byte(b.body))
				if err2 == nil {
					seen2 = want
					if err2 = checkStrict(c2, b.ri.kind, []byte(b.body)); err2 != nil {
						want = nil
					}
				}
				if fmt.Sprint(err1) != fmt.Sprint(err2) {
					t.Fatalf("error %v, want %v", err1, err2)
				}
				if (got == nil) != (want == nil) || got != nil && !reflect.DeepEqual(got, want) {
					t.Fatalf("object\n%#v\nwant\n%#v", got, want)
				}
				if (seen1 == nil) != (seen2 == nil) || seen1 != nil && !reflect.DeepEqual(seen1, seen2) {
					t.Fatalf("decoded %v, want %v", seen1, seen2)
				}
				if h1, h2 := rec1.Header().Values("Warning"), rec2.Header().Values("Warning"); !reflect.DeepEqual(h1, h2) {
					t.Fatalf("warnings %q, want %q", h1, h2)
				}
			})
		}
	}
}

// The common bodies take the single decode.
func TestDecodeStrictOnceTakesCommonBodies(t *testing.T) {
	reg := builtin.New()
	pods, _ := reg.ForResource(store.Pods)
	good, _ := json.Marshal(benchPod("ns", "p-01", nil))
	for _, body := range []string{string(good), `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}`, `{"metadata":{"name":"a"}}`} {
		for _, mode := range []string{"", "Warn", "Strict"} {
			req := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/ns/pods?fieldValidation="+mode, strings.NewReader(body))
			c := echo.New().NewContext(req, httptest.NewRecorder())
			if decodeStrictOnce(c, pods, store.Pods, []byte(body)) == nil {
				t.Errorf("fieldValidation=%q, %s: not decoded in one pass", mode, body)
			}
		}
	}
}
