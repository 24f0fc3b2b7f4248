package deployment

import (
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestWriteExpectations(t *testing.T) {
	rs := func(name, rv string) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, ResourceVersion: rv}}
	}
	cache := map[string]store.Object{}
	get := func(ns, name string) (store.Object, bool) { o, ok := cache[ns+"/"+name]; return o, ok }
	e := newWriteExpectations()
	if !e.satisfied("default/web", "default", get) {
		t.Fatal("no writes must be satisfied")
	}
	cache["default/web-a"] = rs("web-a", "5")
	cache["default/web-b"] = rs("web-b", "6")
	e.wrote("default/web", rs("web-a", "7"))
	e.wrote("default/web", rs("web-b", "8"))
	if e.satisfied("default/web", "default", get) {
		t.Fatal("satisfied while the cache shows neither write")
	}
	if !e.satisfied("default/other", "default", get) {
		t.Fatal("another deployment's writes must not count")
	}
	cache["default/web-a"] = rs("web-a", "9") // a newer version than written
	if e.satisfied("default/web", "default", get) {
		t.Fatal("satisfied while the cache shows one write of two")
	}
	delete(cache, "default/web-b") // deleted (or just created, not seen yet)
	if !e.satisfied("default/web", "default", get) {
		t.Fatal("not satisfied once every write was seen or its replicaset is gone")
	}

	e.wrote("default/web", rs("web-a", "10"))
	e.now = func() time.Time { return time.Now().Add(ExpectationsTimeout + time.Second) }
	if !e.satisfied("default/web", "default", get) {
		t.Fatal("expired expectations must be satisfied")
	}
	e.now = time.Now
	e.wrote("default/web", rs("web-a", "11"))
	e.forget("default/web")
	if !e.satisfied("default/web", "default", get) {
		t.Fatal("forgotten expectations must be satisfied")
	}
}
