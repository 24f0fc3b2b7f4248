package apiserver

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func crdWithSchema(group, schema string) string {
	return fmt.Sprintf(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"things.%s"},
"spec":{"group":"%s","scope":"Namespaced","names":{"plural":"things","kind":"Thing","listKind":"ThingList","singular":"thing"},
"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":%s}}]}}`, group, group, schema)
}

// TestAttackCRDSchemas: CRDs with deep, wide, invalid and many-version
// schemas, then custom resources that are deep, 3 MiB, of another
// kind or version, or badly named: never a 5xx, and discovery and
// OpenAPI keep answering.
func TestAttackCRDSchemas(t *testing.T) {
	e := newEnv(t)
	e.http.Timeout = 2 * time.Minute
	deep := `{"type":"string"}`
	for i := 0; i < 300; i++ {
		deep = `{"type":"object","properties":{"a":` + deep + `}}`
	}
	tooDeep := `{"type":"string"}`
	for i := 0; i < 2000; i++ {
		tooDeep = `{"type":"object","properties":{"a":` + tooDeep + `}}`
	}
	var props []string
	for i := 0; i < 2000; i++ {
		props = append(props, fmt.Sprintf(`"p%d":{"type":"string","pattern":"^a+$"}`, i))
	}
	wide := `{"type":"object","properties":{"spec":{"type":"object","properties":{` + strings.Join(props, ",") + `}}}}`
	var vers []string
	for i := 0; i < 100; i++ {
		vers = append(vers, fmt.Sprintf(`{"name":"v%d","served":true,"storage":%t,"schema":{"openAPIV3Schema":{"type":"object"}}}`, i+1, i == 0))
	}
	manyVersions := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"things.many.example.com"},
"spec":{"group":"many.example.com","scope":"Namespaced","names":{"plural":"things","kind":"Thing","listKind":"ThingList"},"versions":[` + strings.Join(vers, ",") + `]}}`
	for _, tc := range []struct{ name, body string }{
		{"deep", crdWithSchema("deep.example.com", deep)},
		{"wide", crdWithSchema("wide.example.com", wide)},
		{"bad pattern", crdWithSchema("pat.example.com", `{"type":"object","properties":{"x":{"type":"string","pattern":"(("}}}`)},
		{"ref", crdWithSchema("ref.example.com", `{"type":"object","properties":{"x":{"$ref":"#/definitions/x"}}}`)},
		{"no type", crdWithSchema("notype.example.com", `{"properties":{"x":{}}}`)},
		{"bad default", crdWithSchema("def.example.com", `{"type":"object","properties":{"x":{"type":"integer","default":"str"}}}`)},
		{"many versions", manyVersions},
		{"too deep", crdWithSchema("toodeep.example.com", tooDeep)},
	} {
		start := time.Now()
		code, out := e.do(http.MethodPost, crdPath, "application/json", tc.body)
		t.Logf("%s (%d bytes): %d in %v: %s", tc.name, len(tc.body), code, time.Since(start), out[:min(len(out), 300)])
		if code >= 500 || (tc.name == "too deep" && code != http.StatusUnprocessableEntity) {
			t.Errorf("%s: %d", tc.name, code)
		}
	}
	// The server is still alive and serves discovery/openapi.
	for _, p := range []string{"/apis", "/openapi/v2", "/openapi/v3", "/api/v1/namespaces/default"} {
		start := time.Now()
		code, out := e.do(http.MethodGet, p, "", nil)
		t.Logf("%s: %d (%d bytes) in %v", p, code, len(out), time.Since(start))
		if code >= 500 {
			t.Errorf("%s: %d %s", p, code, out[:min(len(out), 300)])
		}
	}
	code, out := e.do(http.MethodGet, crdPath, "", nil)
	if code != 200 {
		t.Errorf("list crds: %d", code)
	}
	_ = out
	// Deep CR under a preserve-unknown-fields CRD.
	e.must(http.StatusCreated, http.MethodPost, crdPath, "application/json", attackCRD("pres.example.com", "things", "Namespaced"), nil)
	e.waitEstablished("things.pres.example.com")
	deepObj := `1`
	for i := 0; i < 9000; i++ {
		deepObj = `{"a":` + deepObj + `}`
	}
	big := strings.Repeat("x", 3<<20)
	for _, b := range []string{
		`{"apiVersion":"pres.example.com/v1","kind":"Thing","metadata":{"name":"deep"},"spec":` + deepObj + `}`,
		`{"apiVersion":"pres.example.com/v1","kind":"Thing","metadata":{"name":"big"},"spec":{"x":"` + big + `"}}`,
		`{"apiVersion":"pres.example.com/v1","kind":"Thing","metadata":{"name":"big2"},"spec":{"x":"` + big[:1<<20] + `"}}`,
		`{"apiVersion":"pres.example.com/v1","kind":"Thing","metadata":{"name":"unk"},"spec":{},"bogus":1}`,
		`{"apiVersion":"pres.example.com/v1","kind":"Other","metadata":{"name":"kind"}}`,
		`{"apiVersion":"pres.example.com/v2","kind":"Thing","metadata":{"name":"v2"}}`,
		`{"apiVersion":"pres.example.com/v1","kind":"Thing","metadata":{"name":"Bad_Name"}}`,
		`{"apiVersion":"pres.example.com/v1","kind":"Thing","metadata":{"name":"sp"},"spec":"notanobject"}`,
	} {
		var code int
		var out []byte
		storetest.Eventually(t, 10*time.Second, func() error {
			code, out = e.do(http.MethodPost, "/apis/pres.example.com/v1/namespaces/default/things", "application/json", b)
			if code == 404 && strings.Contains(string(out), "the server could not find") {
				return fmt.Errorf("not served yet")
			}
			return nil
		})
		t.Logf("CR %.80s...: %d %s", b, code, out[:min(len(out), 300)])
		if code >= 500 {
			t.Errorf("CR: %d", code)
		}
	}
}

// A CRD deleted while clients write and watch its custom resources:
// no 5xx, the watch ends, and nothing is left behind.
func TestAttackCRDDeleteWhileWriting(t *testing.T) {
	e := newEnv(t)
	e.must(http.StatusCreated, http.MethodPost, crdPath, "application/json", attackCRD("del.example.com", "things", "Namespaced"), nil)
	e.waitEstablished("things.del.example.com")
	storetest.Eventually(t, 10*time.Second, func() error {
		if code, _ := e.do(http.MethodGet, "/apis/del.example.com/v1/namespaces/default/things", "", nil); code != 200 {
			return fmt.Errorf("%d", code)
		}
		return nil
	})
	resp, err := e.http.Get(e.url + "/apis/del.example.com/v1/namespaces/default/things?watch=1")
	if err != nil {
		t.Fatal(err)
	}
	var events atomic.Int64
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			events.Add(1)
		}
	}()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				code, out := e.do(http.MethodPost, "/apis/del.example.com/v1/namespaces/default/things", "application/json",
					fmt.Sprintf(`{"apiVersion":"del.example.com/v1","kind":"Thing","metadata":{"name":"t%d-%d"}}`, w, i))
				mu.Lock()
				codes[code]++
				mu.Unlock()
				if code >= 500 {
					t.Errorf("create: %d %s", code, out)
					return
				}
			}
		}()
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		if events.Load() < 20 {
			return fmt.Errorf("%d events", events.Load())
		}
		return nil
	})
	e.must(http.StatusOK, http.MethodDelete, crdPath+"/things.del.example.com", "", nil, nil)
	storetest.Eventually(t, 30*time.Second, func() error {
		if code, out := e.do(http.MethodGet, crdPath+"/things.del.example.com", "", nil); code != 404 {
			return fmt.Errorf("CRD still there: %d %.300s", code, out)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	t.Logf("create codes %v, watch events %d", codes, events.Load())
	select {
	case <-watchDone:
	case <-time.After(10 * time.Second):
		t.Errorf("watch of a deleted CRD's kind did not end")
	}
	resp.Body.Close()
	// Re-created cluster-scoped: nothing of the old one shows.
	e.must(http.StatusCreated, http.MethodPost, crdPath, "application/json", attackCRD("del.example.com", "things", "Cluster"), nil)
	e.waitEstablished("things.del.example.com")
	storetest.Eventually(t, 10*time.Second, func() error {
		code, out := e.do(http.MethodGet, "/apis/del.example.com/v1/things", "", nil)
		if code != 200 {
			return fmt.Errorf("%d %s", code, out)
		}
		if strings.Contains(string(out), `"name":"t`) {
			t.Errorf("old custom resources survive the CRD: %.500s", out)
		}
		return nil
	})
}
