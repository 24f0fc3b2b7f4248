package apiserver

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// getWith sends a GET of path with client c and returns status and body.
func (e *env) getWith(c *http.Client, path string) (int, []byte) {
	e.t.Helper()
	resp, err := c.Get(e.url + path)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestProfiling(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { c.Profiling = true }))

	// system:masters: the heap profile (gzipped protobuf), its text form,
	// the goroutine dump, and the index.
	code, body := e.getWith(e.http, "/debug/pprof/heap")
	if code != 200 {
		t.Fatalf("admin heap profile: %d %s", code, body)
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("heap profile is not gzipped protobuf: %v", err)
	}
	if raw, err := io.ReadAll(zr); err != nil || len(raw) == 0 {
		t.Fatalf("heap profile: %d bytes, %v", len(raw), err)
	}
	for path, want := range map[string]string{
		"/debug/pprof/heap?debug=1":      "heap profile:",
		"/debug/pprof/goroutine?debug=1": "goroutine profile:",
		"/debug/pprof/":                  "Types of profiles available",
		"/debug/pprof/cmdline":           "",
	} {
		if code, body := e.getWith(e.http, path); code != 200 || !strings.Contains(string(body), want) {
			t.Errorf("admin GET %s: %d, want 200 with %q: %.200s", path, code, want, body)
		}
	}
	if code, body := e.getWith(e.http, "/debug/pprof/profile?seconds=1"); code != 200 || len(body) == 0 {
		t.Errorf("admin CPU profile: %d, %d bytes", code, len(body))
	}

	// A user with every verb on the core group's resources is still
	// refused: profiling is a non-resource URL only cluster-admin has.
	e.allowGroup("devs")
	dev := e.sec.HTTPClient(e.sec.User("dev", "devs"))
	for _, path := range []string{"/debug/pprof/heap", "/debug/pprof/", "/debug/pprof/profile?seconds=1", "/debug/pprof"} {
		if code, body := e.getWith(dev, path); code != 403 || !strings.Contains(string(body), `cannot get path \"/debug/pprof`) {
			t.Errorf("non-admin GET %s: %d, want 403: %s", path, code, body)
		}
	}

	// A user bound to cluster-admin (not system:masters) may.
	e.must(201, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", "application/json", &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ops-admin"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"}, Subjects: []rbacv1.Subject{{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "ops"}}}, nil)
	ops := e.sec.HTTPClient(e.sec.User("op", "ops"))
	storetest.Eventually(t, 10*time.Second, func() error {
		if code, body := e.getWith(ops, "/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(string(body), "goroutine profile:") {
			return fmt.Errorf("cluster-admin goroutine profile: %d %.200s", code, body)
		}
		return nil
	})
}

func TestProfilingOff(t *testing.T) {
	e := newEnv(t)
	if code, body := e.getWith(e.http, "/debug/pprof/heap"); code != 404 {
		t.Errorf("heap profile without Profiling: %d, want 404: %.200s", code, body)
	}
}
