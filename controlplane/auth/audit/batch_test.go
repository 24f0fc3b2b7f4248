package audit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/orca-edge/orca/controlplane/auth/audit/audittest"
)

// ModeBatch keeps every event, in the order of each request's stages,
// even with a queue of one; Close writes what is queued; after Close a
// request's event is refused.
func TestBatchModeKeepsEveryEventInOrder(t *testing.T) {
	var out audittest.Log
	a, err := New(Options{Out: &out, Mode: ModeBatch, BatchBufferSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := handler(a, jane, false, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/default/configmaps/") {
			LogObject(r.Context(), &metav1.ObjectMeta{Name: "x", UID: "u-1"})
		}
		w.WriteHeader(http.StatusOK)
	})
	const users, each = 8, 50
	var wg sync.WaitGroup
	for u := range users {
		wg.Go(func() {
			for i := range each {
				path := fmt.Sprintf("/api/v1/namespaces/default/pods/u%d-%03d", u, i)
				if i%2 == 1 {
					path = fmt.Sprintf("/api/v1/namespaces/default/configmaps/u%d-%03d", u, i)
				}
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
			}
		})
	}
	wg.Wait()
	// A long-running request: ResponseStarted then ResponseComplete.
	lr := handler(a, jane, true, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
	})
	lr.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/pods?watch=true", nil))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	evs := out.Events(t)
	if len(evs) != users*each+2 {
		t.Fatalf("%d events, want %d", len(evs), users*each+2)
	}
	last := map[int]int{} // user -> last request index seen
	for _, ev := range evs[:users*each] {
		var u, i int
		name := ev.ObjectRef.Name
		if ev.ObjectRef.Resource == "configmaps" && ev.ObjectRef.UID != "u-1" {
			t.Fatalf("objectRef %+v: LogObject's uid lost", ev.ObjectRef)
		}
		if _, err := fmt.Sscanf(name, "u%d-%d", &u, &i); err != nil {
			t.Fatalf("event %s: %v", ev.RequestURI, err)
		}
		if prev, ok := last[u]; ok && i <= prev {
			t.Fatalf("user %d: request %d logged after %d", u, i, prev)
		}
		last[u] = i
		if ev.Stage != auditv1.StageResponseComplete {
			t.Fatalf("stage %s", ev.Stage)
		}
	}
	if s1, s2 := evs[users*each].Stage, evs[users*each+1].Stage; s1 != auditv1.StageResponseStarted || s2 != auditv1.StageResponseComplete {
		t.Fatalf("watch stages %s, %s", s1, s2)
	}
	if a.backend.ProcessEvents(&auditinternal.Event{}) {
		t.Fatal("an event after Close was accepted")
	}
	if n := len(out.Events(t)); n != users*each+2 {
		t.Fatalf("%d events after Close", n)
	}
}

func TestBatchModeOptions(t *testing.T) {
	var out audittest.Log
	if _, err := New(Options{Out: &out, Mode: "fast"}); err == nil {
		t.Error("an unknown mode was accepted")
	}
	if _, err := New(Options{Out: &out, Mode: ModeBatch, BatchBufferSize: -1}); err == nil {
		t.Error("a negative buffer size was accepted")
	}
}
