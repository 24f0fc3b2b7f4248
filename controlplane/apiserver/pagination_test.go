package apiserver

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/pager"

	"github.com/orca-edge/orca/controlplane/store"
)

// coreClient is client-go's REST client for the core group against e.
func (e *env) coreClient() *rest.RESTClient {
	e.t.Helper()
	sch := runtime.NewScheme()
	if err := corev1.AddToScheme(sch); err != nil {
		e.t.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(sch)
	cfg := e.sec.RESTConfig(e.url, nil)
	cfg.APIPath = "/api"
	cfg.ContentConfig = rest.ContentConfig{GroupVersion: &corev1.SchemeGroupVersion, NegotiatedSerializer: codecs.WithoutConversion()}
	cfg.QPS, cfg.Burst = 1000, 1000 // client-go's default (5 QPS) would pace the test
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return rc
}

// createConfigMaps writes n ConfigMaps cm-000.. into namespace through the
// store; every second one has label parity=even.
func (e *env) createConfigMaps(namespace string, n int) {
	e.t.Helper()
	ctx := context.Background()
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("cm-%03d", i)}, Data: map[string]string{"v": "1"}}
		if i%2 == 0 {
			cm.Labels = map[string]string{"parity": "even"}
		}
		if _, err := e.st.Create(ctx, store.ConfigMaps, cm); err != nil {
			e.t.Fatal(err)
		}
	}
}

// listPage GETs path with query q and decodes the ConfigMapList (or the
// Status when not 200).
func (e *env) listPage(path string, q url.Values) (int, corev1.ConfigMapList, metav1.Status) {
	e.t.Helper()
	code, out := e.do(http.MethodGet, path+"?"+q.Encode(), "", nil)
	var l corev1.ConfigMapList
	var st metav1.Status
	if code == http.StatusOK {
		if err := jsonUnmarshal(out, &l); err != nil {
			e.t.Fatalf("decode list: %v: %s", err, out)
		}
	} else if err := jsonUnmarshal(out, &st); err != nil {
		e.t.Fatalf("decode status %d: %v: %s", code, err, out)
	}
	return code, l, st
}

func names(items []corev1.ConfigMap) []string {
	out := make([]string, len(items))
	for i, cm := range items {
		out[i] = cm.Namespace + "/" + cm.Name
	}
	return out
}

// TestListPagination: client-go's ListPager over 500 ConfigMaps with a
// page size of 50 makes exactly 10 requests and gets every item once, in
// one namespace, across namespaces and for a cluster-scoped kind; selectors
// apply before the limit; kubectl --chunk-size lists all of them.
func TestListPagination(t *testing.T) {
	e := newEnv(t)
	e.createConfigMaps("default", 500)
	e.must(http.StatusCreated, http.MethodPost, "/api/v1/namespaces", "", `{"metadata":{"name":"other"}}`, nil)
	e.createConfigMaps("other", 20)
	rc := e.coreClient()
	ctx := context.Background()

	pagedList := func(namespace, resource string, size int64, opts metav1.ListOptions) (int, []string) {
		t.Helper()
		pages := 0
		p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			pages++
			return rc.Get().Namespace(namespace).Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Get()
		})
		p.PageSize = size
		var got []string
		if err := p.EachListItem(ctx, opts, func(o runtime.Object) error {
			m, err := meta.Accessor(o)
			if err != nil {
				return err
			}
			got = append(got, m.GetNamespace()+"/"+m.GetName())
			return nil
		}); err != nil {
			t.Fatalf("pager over %s %s: %v", namespace, resource, err)
		}
		return pages, got
	}
	checkAll := func(what string, got []string, want int) {
		t.Helper()
		seen := map[string]bool{}
		for _, n := range got {
			if seen[n] {
				t.Errorf("%s: %s listed twice", what, n)
			}
			seen[n] = true
		}
		if len(got) != want {
			t.Errorf("%s: %d items, want %d", what, len(got), want)
		}
	}

	pages, got := pagedList("default", "configmaps", 50, metav1.ListOptions{})
	if pages != 10 {
		t.Errorf("default configmaps: %d pages of 50, want 10", pages)
	}
	checkAll("default configmaps", got, 500)

	pages, got = pagedList("", "configmaps", 50, metav1.ListOptions{})
	if pages != 11 {
		t.Errorf("all-namespace configmaps: %d pages of 50, want 11", pages)
	}
	checkAll("all-namespace configmaps", got, 520)

	var all corev1.NamespaceList
	e.must(http.StatusOK, http.MethodGet, "/api/v1/namespaces", "", nil, &all)
	pages, got = pagedList("", "namespaces", 1, metav1.ListOptions{})
	if pages != len(all.Items) || len(all.Items) < 2 {
		t.Errorf("namespaces: %d pages of 1, want %d", pages, len(all.Items))
	}
	checkAll("namespaces", got, len(all.Items))

	// Selectors apply before the limit.
	pages, got = pagedList("default", "configmaps", 7, metav1.ListOptions{LabelSelector: "parity=even"})
	if pages != 36 { // ceil(250/7)
		t.Errorf("parity=even by 7: %d pages, want 36", pages)
	}
	checkAll("parity=even", got, 250)
	code, l, _ := e.listPage("/api/v1/namespaces/default/configmaps", url.Values{"labelSelector": {"parity=even"}, "limit": {"7"}})
	if code != http.StatusOK || len(l.Items) != 7 || l.Continue == "" || l.RemainingItemCount == nil || *l.RemainingItemCount != 243 {
		t.Errorf("first page of parity=even by 7: %d, %d items, continue %q, remaining %v", code, len(l.Items), l.Continue, l.RemainingItemCount)
	}
	code, l, _ = e.listPage("/api/v1/configmaps", url.Values{"fieldSelector": {"metadata.name=cm-007"}, "limit": {"1"}})
	if code != http.StatusOK || len(l.Items) != 1 || l.Continue == "" || l.RemainingItemCount == nil || *l.RemainingItemCount != 1 {
		t.Fatalf("metadata.name=cm-007 by 1: %d %v continue %q", code, names(l.Items), l.Continue)
	}
	code, l2, _ := e.listPage("/api/v1/configmaps", url.Values{"fieldSelector": {"metadata.name=cm-007"}, "limit": {"1"}, "continue": {l.Continue}})
	if code != http.StatusOK || strings.Join(names(l2.Items), ",") != "other/cm-007" || l2.Continue != "" || l2.RemainingItemCount != nil {
		t.Errorf("second page of metadata.name=cm-007: %d %v continue %q", code, names(l2.Items), l2.Continue)
	}

	// kubectl's chunked get, as a Table and as names (kubectl paces itself
	// at 5 requests a second: few pages).
	out := e.mustKubectl("", "get", "configmaps", "-n", "other", "--chunk-size=7")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 21 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[20], "cm-019") {
		t.Errorf("kubectl get --chunk-size=7: %d lines, want a header and 20 rows: %.300s", len(lines), out)
	}
	out = e.mustKubectl("", "get", "configmaps", "-A", "-o", "name", "--chunk-size=100")
	if n := strings.Count(out, "configmap/"); n != 520 {
		t.Errorf("kubectl get -A -o name --chunk-size=100: %d names, want 520", n)
	}
}

// TestListContinueSnapshot: every page of a list reflects the first
// page's resourceVersion, whatever is created, changed or deleted between
// the pages; a new list sees the writes.
func TestListContinueSnapshot(t *testing.T) {
	e := newEnv(t)
	e.createConfigMaps("default", 30)
	const path = "/api/v1/namespaces/default/configmaps"
	code, first, _ := e.listPage(path, url.Values{"limit": {"10"}})
	if code != http.StatusOK || len(first.Items) != 10 || first.Continue == "" || first.RemainingItemCount == nil || *first.RemainingItemCount != 20 {
		t.Fatalf("first page: %d, %d items, continue %q, remaining %v", code, len(first.Items), first.Continue, first.RemainingItemCount)
	}
	ctx := context.Background()
	// Writes between pages: one created after the first page's keys, one
	// changed on the second page, one deleted on the third.
	e.must(http.StatusCreated, http.MethodPost, path, "", `{"metadata":{"name":"cm-015a"}}`, nil)
	cur, err := e.st.Get(ctx, store.ConfigMaps, "default", "cm-012")
	if err != nil {
		t.Fatal(err)
	}
	cm := cur.DeepCopyObject().(*corev1.ConfigMap)
	cm.Data = map[string]string{"v": "2"}
	if _, err := e.st.Update(ctx, store.ConfigMaps, cm); err != nil {
		t.Fatal(err)
	}
	e.must(http.StatusOK, http.MethodDelete, path+"/cm-025", "", nil, nil)

	got := names(first.Items)
	token := first.Continue
	for page := 2; token != ""; page++ {
		code, l, st := e.listPage(path, url.Values{"limit": {"10"}, "continue": {token}})
		if code != http.StatusOK {
			t.Fatalf("page %d: %d %+v", page, code, st)
		}
		if l.ResourceVersion != first.ResourceVersion {
			t.Errorf("page %d: resourceVersion %s, want the first page's %s", page, l.ResourceVersion, first.ResourceVersion)
		}
		for _, cm := range l.Items {
			if cm.Name == "cm-012" && cm.Data["v"] != "1" {
				t.Errorf("page %d: cm-012 as changed after the first page: %v", page, cm.Data)
			}
		}
		got = append(got, names(l.Items)...)
		token = l.Continue
	}
	want := make([]string, 30)
	for i := range want {
		want[i] = fmt.Sprintf("default/cm-%03d", i)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("paged list with writes between pages:\n got %v\nwant %v", got, want)
	}
	var now corev1.ConfigMapList
	e.must(http.StatusOK, http.MethodGet, path, "", nil, &now)
	n := names(now.Items)
	if len(n) != 30 || !sort.StringsAreSorted(n) || !strings.Contains(strings.Join(n, ","), "cm-015a") || strings.Contains(strings.Join(n, ","), "cm-025") {
		t.Errorf("a new list does not show the writes: %v", n)
	}
}

// TestListContinueExpired: a continue token whose revision is older than
// what the watch cache keeps is 410 Gone, reason Expired, with Kubernetes'
// message and a token that continues at the latest revision; a malformed
// token is a 400.
func TestListContinueExpired(t *testing.T) {
	e := newEnv(t, withWatchCache(3))
	e.createConfigMaps("default", 10)
	const path = "/api/v1/namespaces/default/configmaps"
	code, first, _ := e.listPage(path, url.Values{"limit": {"4"}})
	if code != http.StatusOK || first.Continue == "" {
		t.Fatalf("first page: %d continue %q", code, first.Continue)
	}
	// Within the kept window (3 events) the snapshot is still served.
	e.must(http.StatusOK, http.MethodDelete, path+"/cm-005", "", nil, nil)
	code, l, st := e.listPage(path, url.Values{"limit": {"4"}, "continue": {first.Continue}})
	if code != http.StatusOK || strings.Join(names(l.Items), ",") != "default/cm-004,default/cm-005,default/cm-006,default/cm-007" {
		t.Fatalf("page 2 after one write: %d %v %+v", code, names(l.Items), st)
	}
	for i := range 4 {
		e.must(http.StatusCreated, http.MethodPost, path, "", fmt.Sprintf(`{"metadata":{"name":"new-%d"}}`, i), nil)
	}
	code, _, st = e.listPage(path, url.Values{"limit": {"4"}, "continue": {first.Continue}})
	if code != http.StatusGone || st.Reason != metav1.StatusReasonExpired || st.Message != inconsistentContinue || st.Continue == "" {
		t.Fatalf("continue after the cache moved on: %d %+v, want 410 Expired with a new token", code, st)
	}
	if !apierrors.IsResourceExpired(apierrors.FromObject(&st)) {
		t.Errorf("410 is not IsResourceExpired: %+v", st)
	}
	// The token in the 410 continues, inconsistently, at the latest revision.
	code, l, _ = e.listPage(path, url.Values{"limit": {"100"}, "continue": {st.Continue}})
	if code != http.StatusOK || strings.Join(names(l.Items), ",") != "default/cm-004,default/cm-006,default/cm-007,default/cm-008,default/cm-009,default/new-0,default/new-1,default/new-2,default/new-3" {
		t.Errorf("continue with the 410's token: %d %v", code, names(l.Items))
	}

	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, token := range []string{"garbage!", b64("not json"), b64(`{"v":"v2","rv":5,"start":"default.cm-001\u0000"}`),
		b64(`{"v":"meta.k8s.io/v1","rv":0,"start":"default.cm-001"}`), b64(`{"v":"meta.k8s.io/v1","rv":5,"start":""}`)} {
		code, _, st := e.listPage(path, url.Values{"limit": {"4"}, "continue": {token}})
		if code != http.StatusBadRequest || !strings.Contains(st.Message, "invalid continue token") {
			t.Errorf("continue=%s: %d %q, want 400 invalid continue token", token, code, st.Message)
		}
	}
	if code, _, st := e.listPage(path, url.Values{"continue": {first.Continue}, "resourceVersion": {first.ResourceVersion}}); code != http.StatusBadRequest {
		t.Errorf("continue with a resourceVersion: %d %+v, want 400", code, st)
	}
}

// TestWatchListNeedsNotOlderThan: sendInitialEvents=true on a watch is a
// 422 Invalid unless resourceVersionMatch=NotOlderThan (Kubernetes'
// ValidateListOptions message); with it, the watch sends the state and
// the initial-events-end bookmark (TestWatchSendInitialEvents).
func TestWatchListNeedsNotOlderThan(t *testing.T) {
	e := newEnv(t)
	for _, q := range []string{"watch=true&sendInitialEvents=true", "watch=true&sendInitialEvents=true&resourceVersion=1&resourceVersionMatch=Exact"} {
		code, out := e.do(http.MethodGet, "/api/v1/namespaces/default/configmaps?"+q, "", nil)
		var st metav1.Status
		if err := jsonUnmarshal(out, &st); err != nil || code != http.StatusUnprocessableEntity || st.Reason != metav1.StatusReasonInvalid ||
			!strings.Contains(st.Message, "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan") {
			t.Errorf("?%s: %d %s, want 422 Invalid", q, code, out)
		}
	}
}
