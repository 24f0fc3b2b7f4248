package apiserver

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// resourceVersionMatch=Exact lists the state at exactly that
// resourceVersion (Kubernetes: "Exact: Return data at the exact
// resource version provided") while the watch cache's history reaches
// back to it, and answers 410 Expired before that.
func TestListResourceVersionMatchExact(t *testing.T) {
	e := newEnv(t)
	cs := e.clientset()
	ctx := context.Background()
	// The first list starts the watch cache of configmaps: its history
	// begins there.
	if _, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv1 := cm.ResourceVersion
	cm.Data["v"] = "2"
	if _, err := cs.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{ResourceVersion: rv1, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		t.Fatal(err)
	}
	if l.ResourceVersion != rv1 || len(l.Items) != 1 || l.Items[0].Data["v"] != "1" {
		t.Errorf("Exact list at %s: list rv %s, items %d, v=%q; want rv %s and v=1", rv1, l.ResourceVersion, len(l.Items), l.Items[0].Data["v"], rv1)
	}
}

// A watch with a label selector resumed from resourceVersion R: an object
// that matched at R and is then relabelled out of the selector must be
// sent as DELETED (kube-apiserver's cacheWatcher compares the event's old
// object); orca only knows objects this watch has already sent, so it
// drops the event and the informer keeps the stale object forever.
func TestSelectorWatchResumedSeesObjectLeave(t *testing.T) {
	e := newEnv(t)
	cs := e.clientset()
	ctx := context.Background()
	cm, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{"app": "a"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{LabelSelector: "app=a", ResourceVersion: cm.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cm.Labels["app"] = "b"
	if _, err := cs.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Deleted {
			t.Errorf("got %s, want DELETED", ev.Type)
		}
	case <-time.After(3 * time.Second):
		t.Errorf("no event: the watcher of app=a never learns x left the selector")
	}
}
