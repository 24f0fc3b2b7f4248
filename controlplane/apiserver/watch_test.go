package apiserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type rawEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// openWatch starts a watch request and returns a channel of its events.
func (e *env) openWatch(ctx context.Context, path string) <-chan rawEvent {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+path, nil)
	resp, err := e.stream.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		e.t.Fatalf("watch %s: %d", path, resp.StatusCode)
	}
	ch := make(chan rawEvent, 100)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev rawEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				ch <- ev
			}
		}
	}()
	return ch
}

func next(t *testing.T, ch <-chan rawEvent) (string, corev1.Pod) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch ended")
		}
		var p corev1.Pod
		_ = json.Unmarshal(ev.Object, &p)
		return ev.Type, p
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event within 10s")
	}
	return "", corev1.Pod{}
}

func TestWatch(t *testing.T) {
	e := newEnv(t, withWatchCache(8))
	const pods = "/api/v1/namespaces/default/pods"
	var first corev1.Pod
	e.must(http.StatusCreated, "POST", pods, "application/json", podJSON("a"), &first)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	all := e.openWatch(ctx, pods+"?watch=true")
	sel := e.openWatch(ctx, "/api/v1/watch/namespaces/default/pods?labelSelector=tier%3Dedge")
	if typ, p := next(t, all); typ != "ADDED" || p.Name != "a" {
		t.Fatalf("initial event %s %s", typ, p.Name)
	}
	var b corev1.Pod
	e.must(http.StatusCreated, "POST", pods, "application/json", podJSON("b"), &b)
	e.must(http.StatusOK, "PATCH", pods+"/b", "application/merge-patch+json", `{"metadata":{"labels":{"tier":"edge"}}}`, nil)
	e.must(http.StatusOK, "PATCH", pods+"/b", "application/merge-patch+json", `{"metadata":{"labels":{"tier":"core"}}}`, nil)
	e.must(http.StatusOK, "DELETE", pods+"/b", "", nil, nil)
	var lastRV string
	for _, want := range []string{"ADDED b", "MODIFIED b", "MODIFIED b", "DELETED b"} {
		typ, p := next(t, all)
		if got := typ + " " + p.Name; got != want {
			t.Fatalf("event %q, want %q", got, want)
		}
		if p.ResourceVersion == "" || p.ResourceVersion == lastRV {
			t.Errorf("event %s has resourceVersion %q", want, p.ResourceVersion)
		}
		lastRV = p.ResourceVersion
	}
	// The selector watch sees b enter (ADDED) and leave (DELETED).
	for _, want := range []string{"ADDED b", "DELETED b"} {
		if typ, p := next(t, sel); typ+" "+p.Name != want {
			t.Fatalf("selector event %q, want %q", typ+" "+p.Name, want)
		}
	}

	// Resume after b's creation: the later events only.
	resumed := e.openWatch(ctx, pods+"?watch=1&resourceVersion="+b.ResourceVersion)
	for _, want := range []string{"MODIFIED b", "MODIFIED b", "DELETED b"} {
		if typ, p := next(t, resumed); typ+" "+p.Name != want {
			t.Fatalf("resumed event %q, want %q", typ+" "+p.Name, want)
		}
	}

	// timeoutSeconds ends the stream.
	short := e.openWatch(ctx, pods+"?watch=true&timeoutSeconds=1&resourceVersion="+lastRV)
	select {
	case _, ok := <-short:
		if ok {
			t.Error("unexpected event on idle watch")
		}
	case <-time.After(10 * time.Second):
		t.Error("timeoutSeconds=1 did not end the watch")
	}

	// Push the first revision out of the watch cache: 410 as an ERROR event.
	for i := 0; i < 12; i++ {
		e.must(http.StatusOK, "PATCH", pods+"/a", "application/merge-patch+json", fmt.Sprintf(`{"metadata":{"labels":{"n":"%d"}}}`, i), nil)
	}
	e.must(http.StatusOK, "GET", pods, "", nil, nil) // a list waits until the watch cache has caught up
	gone := e.openWatch(ctx, pods+"?watch=true&resourceVersion="+first.ResourceVersion)
	select {
	case ev := <-gone:
		var st metav1.Status
		_ = json.Unmarshal(ev.Object, &st)
		if ev.Type != "ERROR" || st.Code != 410 || st.Reason != metav1.StatusReasonExpired {
			t.Errorf("old resourceVersion: %s %+v", ev.Type, st)
		}
	case <-time.After(10 * time.Second):
		t.Error("no ERROR event for an expired resourceVersion")
	}

	// Bookmarks only when allowed.
	bm := e.openWatch(ctx, pods+"?watch=true&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan")
	typ, _ := next(t, bm)
	if typ != "ADDED" {
		t.Fatalf("first event %s", typ)
	}
	typ, p := next(t, bm)
	if typ != "BOOKMARK" || p.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
		t.Errorf("bookmark: %s %v", typ, p.Annotations)
	}
}
