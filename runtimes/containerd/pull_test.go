package containerd_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/containerd"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
)

// countingProxy serves the registry through a reverse proxy on loopback
// that counts the manifest requests (a pull resolves its tag with one).
func countingProxy(t *testing.T, reg *containerdtest.Registry) (host string, manifests *atomic.Int64) {
	t.Helper()
	target, _ := url.Parse("http://" + reg.Host)
	rp := httputil.NewSingleHostReverseProxy(target)
	manifests = &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/manifests/") && r.Method != http.MethodPut {
			manifests.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), manifests
}

// Pull policies as the kubelet's: Never only runs what is there;
// IfNotPresent pulls once; Always pulls every time and picks up a tag
// that moved.
func TestPullPolicies(t *testing.T) {
	e := env{d: containerdtest.Start(t)}
	e.rt = openRuntime(t, e.d, e.d.RuntimeConfig(t))
	reg := containerdtest.StartRegistry(t)
	ctx := testCtx(t)
	_, first, err := reg.Push(ctx, bytes.NewReader(archives[jobImage]), "team/job:v1")
	if err != nil {
		t.Fatal(err)
	}
	host, manifests := countingProxy(t, reg)
	ref := host + "/team/job:v1"

	s := spec(t, ref)
	s.PullPolicy = containerd.PullNever
	_, err = e.rt.Start(ctx, s)
	if !errors.Is(err, runtimes.ErrImageNeverPull) || !errors.Is(err, runtimes.ErrImage) || !strings.Contains(err.Error(), "pull policy is Never") {
		t.Fatalf("Never with a missing image: %v, want ErrImageNeverPull", err)
	}
	if manifests.Load() != 0 {
		t.Fatalf("Never reached the registry")
	}

	s = spec(t, ref)
	s.PullPolicy = containerd.PullIfNotPresent
	begin := time.Now()
	if _, err := e.rt.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Logf("pull of %s (%d KiB archive) from the loopback registry and start: %v", ref, len(archives[jobImage])>>10, time.Since(begin))
	st, err := e.rt.Wait(ctx, s.ID)
	if err != nil || st.ExitCode != 0 {
		t.Fatalf("Wait: %+v, %v", st, err)
	}
	if want := host + "/team/job@" + first.String(); st.ImageID != want {
		t.Errorf("ImageID = %q, want %q", st.ImageID, want)
	}
	e.rt.Remove(ctx, s.ID)
	pulled := manifests.Load()
	if pulled == 0 {
		t.Fatal("IfNotPresent did not reach the registry")
	}

	// The tag moves to another image.
	_, second, err := reg.Push(ctx, bytes.NewReader(archives[cmdImage]), "team/job:v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{containerd.PullIfNotPresent, containerd.PullNever, ""} {
		s = spec(t, ref)
		s.PullPolicy = policy
		st, _ := run(t, e.rt, s)
		if st.ImageID != host+"/team/job@"+first.String() {
			t.Errorf("policy %q: ImageID %s, want the image present (%s)", policy, st.ImageID, first)
		}
	}
	if manifests.Load() != pulled {
		t.Errorf("IfNotPresent/Never with the image present reached the registry")
	}
	s = spec(t, ref)
	s.PullPolicy = containerd.PullAlways
	st, out := run(t, e.rt, s)
	if st.ImageID != host+"/team/job@"+second.String() || !strings.Contains(out, "args=from,cmd") {
		t.Errorf("Always: ImageID %s (want %s), output %q: the moved tag was not pulled", st.ImageID, second, out)
	}

	s = spec(t, ref)
	s.PullPolicy = "Sometimes"
	if _, err := e.rt.Start(ctx, s); !errors.Is(err, runtimes.ErrImage) {
		t.Errorf("unknown policy: %v, want ErrImage", err)
	}
}

// A registry that requires credentials: without them, or with wrong
// ones, the pull fails with ErrImage; with the pod's secret for that host
// (after a non-matching and a wrong one) it succeeds.
func TestPullWithCredentials(t *testing.T) {
	e := env{d: containerdtest.Start(t)}
	e.rt = openRuntime(t, e.d, e.d.RuntimeConfig(t))
	reg := containerdtest.StartRegistry(t, containerdtest.WithBasicAuth("robot", "s3cret"))
	ctx := testCtx(t)
	ref, _, err := reg.Push(ctx, bytes.NewReader(archives[jobImage]), "private/job:v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range [][]runtimes.RegistryAuth{
		nil,
		{{Server: reg.Host, Username: "robot", Password: "wrong"}},
		{{Server: "other.example.com", Username: "robot", Password: "s3cret"}},
	} {
		s := spec(t, ref)
		s.RegistryAuth = auth
		_, err := e.rt.Start(ctx, s)
		if !errors.Is(err, runtimes.ErrImage) || errors.Is(err, runtimes.ErrImageNeverPull) {
			t.Errorf("auth %v: %v, want ErrImage", auth, err)
		}
	}
	s := spec(t, ref)
	s.RegistryAuth = []runtimes.RegistryAuth{
		{Server: "other.example.com", Username: "x", Password: "y"},
		{Server: "http://" + reg.Host + "/v2/", Username: "robot", Password: "wrong"},
		{Server: reg.Host, Username: "robot", Password: "s3cret"},
	}
	if st, _ := run(t, e.rt, s); st.ExitCode != 0 {
		t.Errorf("pull with credentials: %+v", st)
	}
}

// Concurrent Starts of one image pull it once.
func TestConcurrentStartsPullOnce(t *testing.T) {
	e := env{d: containerdtest.Start(t)}
	e.rt = openRuntime(t, e.d, e.d.RuntimeConfig(t))
	reg := containerdtest.StartRegistry(t)
	ctx := testCtx(t)
	if _, _, err := reg.Push(ctx, bytes.NewReader(archives[jobImage]), "job:v1"); err != nil {
		t.Fatal(err)
	}
	host, manifests := countingProxy(t, reg)
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	specs := make([]runtimes.TaskSpec, n)
	for i := range specs {
		specs[i] = spec(t, host+"/job:v1")
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.rt.Start(ctx, specs[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Start %d: %v", i, err)
		}
		e.rt.Wait(ctx, specs[i].ID)
		e.rt.Remove(ctx, specs[i].ID)
	}
	// One pull resolves the tag (HEAD or GET) and reads the manifest: at
	// most 2 requests, where 4 pulls would make 4 or more.
	if got := manifests.Load(); got > 2 {
		t.Errorf("%d concurrent Starts made %d manifest requests: the image was pulled more than once", n, got)
	}
}
