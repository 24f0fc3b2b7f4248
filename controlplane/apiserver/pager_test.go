package apiserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// clientset is client-go's typed clientset against e, not rate-limited.
func (e *env) clientset() kubernetes.Interface {
	e.t.Helper()
	rc := e.sec.RESTConfig(e.url, nil)
	rc.QPS, rc.Burst = 1000, 1000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		e.t.Fatal(err)
	}
	return cs
}

// TestClientsetPagerGetsTenPages: client-go's ListPager over the typed
// clientset, PageSize 50, over 500 ConfigMaps: exactly 10 page requests
// (counted in the page function), each of at most 50 items, and the
// aggregated list holds all 500 once each.
func TestClientsetPagerGetsTenPages(t *testing.T) {
	e := newEnv(t)
	e.createConfigMaps("default", 500)
	cs := e.clientset()
	ctx := context.Background()
	pages := 0
	p := pager.New(pager.SimplePageFunc(func(opts metav1.ListOptions) (runtime.Object, error) {
		pages++
		l, err := cs.CoreV1().ConfigMaps("default").List(ctx, opts)
		if err == nil && (len(l.Items) > 50 || opts.Limit != 50) {
			return nil, fmt.Errorf("page %d: %d items for limit %d", pages, len(l.Items), opts.Limit)
		}
		return l, err
	}))
	p.PageSize = 50
	list, paginated, err := p.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pages != 10 || !paginated {
		t.Errorf("%d page requests (paginated %v), want 10", pages, paginated)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, o := range items {
		cm := o.(*corev1.ConfigMap)
		if seen[cm.Name] {
			t.Errorf("%s listed twice", cm.Name)
		}
		seen[cm.Name] = true
	}
	if len(items) != 500 || len(seen) != 500 {
		t.Errorf("%d items (%d distinct), want 500", len(items), len(seen))
	}
}

// TestClientsetWatch: the typed clientset's watch.Interface over orca's
// HTTP watch: a resumed watch gets the change after its resourceVersion,
// Stop closes ResultChan, and a watch from a resourceVersion the watch
// cache no longer keeps gets one ERROR event whose Status is 410 Expired
// (client-go's reflector relists on it).
func TestClientsetWatch(t *testing.T) {
	e := newEnv(t, withWatchCache(8))
	cs := e.clientset()
	ctx := context.Background()
	cms := cs.CoreV1().ConfigMaps("default")
	first, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "first"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: first.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "second"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if cm, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Added || !ok || cm.Name != "second" {
			t.Fatalf("resumed watch: %v %T, want ADDED second", ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("resumed watch: no event")
	}
	w.Stop()
	// The channel closes. client-go's StreamWatcher may first deliver the
	// ERROR of reading the body Stop closed (its receive loop races the
	// stop; more often over TLS): only that may come.
	for closed := false; !closed; {
		select {
		case ev, ok := <-w.ResultChan():
			if st, isStatus := ev.Object.(*metav1.Status); ok && (ev.Type != watch.Error || !isStatus || !strings.Contains(st.Message, "closed response body")) {
				t.Fatalf("an event after Stop: %v %+v", ev.Type, ev.Object)
			}
			closed = !ok
		case <-time.After(10 * time.Second):
			t.Fatal("ResultChan not closed after Stop")
		}
	}

	for i := range 12 { // more than the 8 events the cache keeps
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("cm-", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var gone *metav1.Status
	storetest.Eventually(t, 10*time.Second, func() error {
		w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: first.ResourceVersion})
		if err != nil {
			return err
		}
		defer w.Stop()
		select {
		case ev := <-w.ResultChan():
			st, ok := ev.Object.(*metav1.Status)
			if ev.Type != watch.Error || !ok {
				return fmt.Errorf("watch from an evicted revision: %v %T, want ERROR with a Status", ev.Type, ev.Object)
			}
			gone = st
			return nil
		case <-time.After(10 * time.Second):
			return fmt.Errorf("watch from an evicted revision: no event")
		}
	})
	if gone.Code != 410 || !apierrors.IsResourceExpired(apierrors.FromObject(gone)) {
		t.Fatalf("ERROR status %+v, want 410 Expired", gone)
	}
}

// TestClientsetWatchBookmarks: with allowWatchBookmarks a client-go watch
// of one namespace gets periodic BOOKMARKs at the current resourceVersion
// while only another namespace changes.
func TestClientsetWatchBookmarks(t *testing.T) {
	e := newEnv(t, withStoreConfig(func(sc *store.Config) { sc.WatchBookmarkInterval = 20 * time.Millisecond }))
	cs := e.clientset()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cm, err := cs.CoreV1().ConfigMaps("other").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := store.ParseResourceVersion(cm.ResourceVersion)
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-w.ResultChan():
			bm, ok := ev.Object.(*corev1.ConfigMap)
			if ev.Type != watch.Bookmark || !ok {
				t.Fatalf("%v %T on a watch of default, want only BOOKMARKs", ev.Type, ev.Object)
			}
			if rv, _ := store.ParseResourceVersion(bm.ResourceVersion); rv >= want {
				return
			}
		case <-timeout:
			t.Fatalf("no BOOKMARK at or after %d", want)
		}
	}
}
