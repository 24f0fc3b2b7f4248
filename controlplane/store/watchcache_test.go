package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// pageKeys lists r's namespace/name pairs of every page of a list with
// opts, following LastKey, at the first page's revision.
func pageKeys(t *testing.T, s *store.Store, ns string, opts store.ListPageOptions) []string {
	t.Helper()
	var out []string
	for {
		p, err := s.ListPage(context.Background(), store.Pods, ns, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range p.Items {
			out = append(out, o.GetNamespace()+"/"+o.GetName()+"@"+o.GetResourceVersion())
		}
		if p.LastKey == "" {
			if p.Remaining != 0 {
				t.Fatalf("last page with %d remaining", p.Remaining)
			}
			return out
		}
		if want := len(out); p.Remaining <= 0 {
			t.Fatalf("page ending at %d items has LastKey but Remaining %d", want, p.Remaining)
		}
		opts.Revision, opts.Start = p.Revision, p.LastKey+"\x00"
	}
}

// A list whose selector requires an indexed term (a label, a pod's
// spec.nodeName) reads only the objects under it, and answers exactly as
// a scan of every object: same items in key order, same pages, at the
// current revision and at a past one (objects changed, relabelled,
// rescheduled and deleted since).
func TestListPageIndexesAnswerAsAScan(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	var pods []*corev1.Pod
	for i := range 120 {
		ns := []string{"a", "b", "c"}[i%3]
		p := pod(ns, fmt.Sprintf("p%03d", i))
		p.Labels = map[string]string{"app": "x", "tier": []string{"web", "db", "cache", "batch", "rare"}[i%5]}
		if i%7 == 0 {
			p.Labels["tier"] = "gold"
		}
		if i%4 != 0 {
			p.Spec.NodeName = fmt.Sprintf("n%d", i%9)
		}
		out, err := s.Create(ctx, store.Pods, p)
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, out.(*corev1.Pod))
	}
	past, err := s.ListPage(ctx, store.Pods, "", store.ListPageOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	var pastPods []*corev1.Pod
	for _, p := range pods {
		pastPods = append(pastPods, p.DeepCopy())
	}
	// Changes after the past revision: relabel, reschedule, delete.
	for i, p := range pods {
		switch i % 11 {
		case 1:
			p.Labels["tier"] = "gold"
			if _, err := s.Update(ctx, store.Pods, p); err != nil {
				t.Fatal(err)
			}
		case 2:
			p.Spec.NodeName = "n1"
			if _, err := s.Update(ctx, store.Pods, p); err != nil {
				t.Fatal(err)
			}
		case 3:
			if _, err := s.Delete(ctx, store.Pods, p.Namespace, p.Name, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	sels := []struct{ labels, fields string }{
		{"tier=gold", ""}, {"tier==rare", ""}, {"tier in (db)", ""}, {"tier=none", ""}, {"app=x,tier=gold", ""},
		{"tier in (db,web)", ""}, {"tier!=gold", ""}, {"", "spec.nodeName=n1"}, {"", "spec.nodeName=nowhere"},
		{"tier=gold", "spec.nodeName=n1"}, {"", "spec.nodeName="}, {"app=x", ""},
	}
	for _, sc := range sels {
		ls, err := labels.Parse(sc.labels)
		if err != nil {
			t.Fatal(err)
		}
		fs, err := fields.ParseSelector(sc.fields)
		if err != nil {
			t.Fatal(err)
		}
		match := func(o store.Object) bool {
			p := o.(*corev1.Pod)
			return ls.Matches(labels.Set(p.Labels)) && fs.Matches(fields.Set{"spec.nodeName": p.Spec.NodeName})
		}
		for _, ns := range []string{"", "b"} {
			for _, limit := range []int{0, 1, 4} {
				for _, rev := range []uint64{0, past.Revision} {
					scan := pageKeys(t, s, ns, store.ListPageOptions{Revision: rev, Limit: limit, Match: match})
					indexed := pageKeys(t, s, ns, store.ListPageOptions{Revision: rev, Limit: limit, Match: match, Labels: ls, Fields: fs})
					if !slices.Equal(scan, indexed) {
						t.Errorf("labels %q fields %q ns %q limit %d rev %d: indexed %v, scan %v", sc.labels, sc.fields, ns, limit, rev, indexed, scan)
					}
					// The scan is right: every object once, in key order, matching.
					var want []string
					objs := pastPods
					if rev == 0 {
						cur, _, err := s.List(ctx, store.Pods, ns)
						if err != nil {
							t.Fatal(err)
						}
						objs = nil
						for _, o := range cur {
							objs = append(objs, o.(*corev1.Pod))
						}
					}
					for _, p := range objs {
						if (ns == "" || p.Namespace == ns) && match(p) {
							want = append(want, p.Namespace+"/"+p.Name+"@"+p.ResourceVersion)
						}
					}
					slices.SortFunc(want, func(a, b string) int { return compareKeys(a, b) })
					if !slices.Equal(scan, want) {
						t.Errorf("labels %q fields %q ns %q limit %d rev %d: scan %v, want %v", sc.labels, sc.fields, ns, limit, rev, scan, want)
					}
				}
			}
		}
	}
}

// compareKeys orders "ns/name@rv" strings as their store keys.
func compareKeys(a, b string) int {
	key := func(s string) string {
		var ns, name string
		for i := range s {
			if s[i] == '/' {
				ns, name = s[:i], s[i+1:]
				break
			}
		}
		for i := range name {
			if name[i] == '@' {
				name = name[:i]
				break
			}
		}
		return store.Key(ns, name)
	}
	ka, kb := key(a), key(b)
	switch {
	case ka < kb:
		return -1
	case ka > kb:
		return 1
	}
	return 0
}

// Watchers of the same object revision share its JSON (encoded once, as
// the Kubernetes cacher's cachingObject): the bytes are those
// json.Marshal gives for the object with its resourceVersion, a list of
// that revision returns the same bytes, and a DELETED event carries the
// deletion's resourceVersion.
func TestWatchEventsEncodeOncePerRevision(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	created, err := s.Create(ctx, store.Pods, pod("default", "a"))
	if err != nil {
		t.Fatal(err)
	}
	next := func(w store.EventWatch) store.Event {
		t.Helper()
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatal("watch ended")
			}
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no event in 10 s")
		}
		return store.Event{}
	}
	var ws []store.EventWatch
	for range 2 {
		w, err := s.WatchEvents(ctx, store.Pods, "default", 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		ws = append(ws, w)
		if ev := next(w); ev.Type != watch.Added || ev.Object.(store.Object).GetResourceVersion() != created.GetResourceVersion() {
			t.Fatalf("first event %s %v", ev.Type, ev.Object)
		}
		if ev := next(w); ev.Type != watch.Bookmark {
			t.Fatalf("second event %s, want the initial BOOKMARK", ev.Type)
		}
	}
	p := created.(*corev1.Pod).DeepCopy()
	p.Labels["v"] = "2"
	updated, err := s.Update(ctx, store.Pods, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, store.Pods, "default", "a", ""); err != nil {
		t.Fatal(err)
	}
	var mod, del [][]byte
	for _, w := range ws {
		for _, want := range []watch.EventType{watch.Modified, watch.Deleted} {
			ev := next(w)
			if ev.Type != want {
				t.Fatalf("event %s, want %s", ev.Type, want)
			}
			data, err := ev.JSON()
			if err != nil {
				t.Fatal(err)
			}
			direct, _ := json.Marshal(ev.Object)
			if !bytes.Equal(data, direct) {
				t.Fatalf("%s JSON %s, want %s", want, data, direct)
			}
			var got corev1.Pod
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			if want == watch.Modified {
				if got.ResourceVersion != updated.GetResourceVersion() || got.Labels["v"] != "2" || got.Kind != "Pod" {
					t.Fatalf("MODIFIED JSON: %s", data)
				}
				mod = append(mod, data)
			} else {
				if got.ResourceVersion == "" || got.ResourceVersion == updated.GetResourceVersion() {
					t.Fatalf("DELETED JSON has resourceVersion %q, want the deletion's", got.ResourceVersion)
				}
				del = append(del, data)
			}
		}
	}
	if &mod[0][0] != &mod[1][0] || &del[0][0] != &del[1][0] {
		t.Fatal("two watchers of one event got separately encoded JSON")
	}

	b, err := s.Create(ctx, store.Pods, pod("default", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitFresh(ctx, store.Pods); err != nil {
		t.Fatal(err)
	}
	w, err := s.WatchEvents(ctx, store.Pods, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev := next(w)
	if ev.Type != watch.Added || ev.Object.(store.Object).GetName() != "b" {
		t.Fatalf("first event %s %v, want b ADDED", ev.Type, ev.Object)
	}
	evJSON, _ := ev.JSON()
	page, err := s.ListPage(ctx, store.Pods, "default", store.ListPageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || page.Items[0].GetResourceVersion() != b.GetResourceVersion() {
		t.Fatalf("list: %v", page.Items)
	}
	listJSON, err := page.ItemJSON(0)
	if err != nil {
		t.Fatal(err)
	}
	if &listJSON[0] != &evJSON[0] {
		t.Fatal("a list and a watch of one object revision encoded it twice")
	}
}

// GetCached reads from the watch cache, falls back to NATS for what the
// cache does not hold, answers NotFound for what does not exist, and
// returns a copy the caller may change.
func TestGetCached(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	if _, err := s.Create(ctx, store.Pods, pod("default", "a")); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetCached(ctx, store.Pods, "default", "a") // starts the cache
	if err != nil || got.GetName() != "a" {
		t.Fatalf("GetCached: %v %v", got, err)
	}
	got.SetLabels(map[string]string{"changed": "yes"})
	again, err := s.GetCached(ctx, store.Pods, "default", "a")
	if err != nil || again.GetLabels()["changed"] != "" {
		t.Fatalf("GetCached after changing a returned object: %v %v", again, err)
	}
	// Written after the cache loaded: from the cache once applied, from
	// NATS before; either way the object.
	b, err := s.Create(ctx, store.Pods, pod("default", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetCached(ctx, store.Pods, "default", "b"); err != nil || got.GetResourceVersion() != b.GetResourceVersion() {
		t.Fatalf("GetCached of a new object: %v %v", got, err)
	}
	if _, err := s.GetCached(ctx, store.Pods, "default", "missing"); !apierrors.IsNotFound(err) {
		t.Fatalf("GetCached of a missing object: %v; want NotFound", err)
	}
}
