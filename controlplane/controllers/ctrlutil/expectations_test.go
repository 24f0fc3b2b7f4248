package ctrlutil_test

import (
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/store"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// clock is a settable clock for WithExpectationsClock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestExpectations(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	e := ctrlutil.NewExpectations(ctrlutil.WithExpectationsClock(clk.now))
	if !e.Satisfied("a") {
		t.Fatal("no expectations must be satisfied")
	}
	e.Expect("a", 2, 0)
	e.CreationObserved("a")
	if e.Satisfied("a") {
		t.Fatal("satisfied with one creation pending")
	}
	if !e.Satisfied("b") {
		t.Fatal("another key's expectations must not count")
	}
	e.CreationObserved("a")
	if !e.Satisfied("a") {
		t.Fatal("not satisfied after all creations observed")
	}
	e.Expect("a", 0, 2)
	e.Lower("a", 0, 1) // one deletion failed
	if e.Satisfied("a") {
		t.Fatal("satisfied with one deletion pending")
	}
	e.DeletionObserved("a", "uid-1")
	if !e.Satisfied("a") {
		t.Fatal("not satisfied after all deletions observed")
	}
	e.Expect("a", 0, 1)
	clk.t = clk.t.Add(ctrlutil.DefaultExpectationsTimeout)
	if e.Satisfied("a") {
		t.Fatal("satisfied before the timeout passed")
	}
	clk.t = clk.t.Add(time.Second)
	if !e.Satisfied("a") {
		t.Fatal("expired expectations must be satisfied")
	}
	e.Expect("a", 1, 0)
	e.Delete("a")
	if !e.Satisfied("a") {
		t.Fatal("deleted expectations must be satisfied")
	}
}

// Deletions named by uid count once each: a pod deleted gracefully is
// reported when it gets its deletionTimestamp and again when it goes.
func TestExpectDeletions(t *testing.T) {
	e := ctrlutil.NewExpectations()
	e.ExpectDeletions("a", []types.UID{"p1", "p2"})
	e.DeletionObserved("a", "p1") // deletionTimestamp set
	e.DeletionObserved("a", "p1") // gone
	e.DeletionObserved("a", "p3") // not one the controller deleted
	if e.Satisfied("a") {
		t.Fatal("satisfied while p2's deletion is pending")
	}
	e.DeletionObserved("a", "p2")
	if !e.Satisfied("a") {
		t.Fatal("not satisfied after both deletions observed")
	}
	// Expect replaces the names: any deletion counts again.
	e.ExpectDeletions("a", []types.UID{"p4"})
	e.Expect("a", 0, 2)
	e.DeletionObserved("a", "p5")
	e.DeletionObserved("a", "p5")
	if !e.Satisfied("a") {
		t.Fatal("counted deletions not satisfied after two reports")
	}
}

func TestExpectationsTimeout(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	e := ctrlutil.NewExpectations(ctrlutil.WithExpectationsClock(clk.now), ctrlutil.WithExpectationsTimeout(5*time.Minute))
	e.Expect("a", 1, 0)
	clk.t = clk.t.Add(ctrlutil.DefaultExpectationsTimeout + time.Second)
	if e.Satisfied("a") {
		t.Fatal("satisfied after the default timeout, not the one set")
	}
	clk.t = clk.t.Add(5 * time.Minute)
	if !e.Satisfied("a") {
		t.Fatal("expired expectations must be satisfied")
	}
}

func TestWriteExpectations(t *testing.T) {
	rs := func(name, rv string) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, ResourceVersion: rv}}
	}
	cache := map[string]store.Object{}
	get := func(ns, name string) (store.Object, bool) { o, ok := cache[ns+"/"+name]; return o, ok }
	satisfied := func(e *ctrlutil.Expectations, key string) bool {
		e.ObserveWrites(key, "default", get)
		return e.Satisfied(key)
	}
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	e := ctrlutil.NewExpectations(ctrlutil.WithExpectationsClock(clk.now))
	if !satisfied(e, "default/web") {
		t.Fatal("no writes must be satisfied")
	}
	cache["default/web-a"] = rs("web-a", "5")
	cache["default/web-b"] = rs("web-b", "6")
	e.ExpectWrite("default/web", rs("web-a", "7"))
	e.ExpectWrite("default/web", rs("web-b", "8"))
	e.ExpectWrite("default/web", rs("web-c", "")) // no resourceVersion: ignored
	if satisfied(e, "default/web") {
		t.Fatal("satisfied while the cache shows neither write")
	}
	if !satisfied(e, "default/other") {
		t.Fatal("another deployment's writes must not count")
	}
	cache["default/web-a"] = rs("web-a", "9") // a newer version than written
	if satisfied(e, "default/web") {
		t.Fatal("satisfied while the cache shows one write of two")
	}
	delete(cache, "default/web-b") // deleted (or just created, not seen yet)
	if !satisfied(e, "default/web") {
		t.Fatal("not satisfied once every write was seen or its replicaset is gone")
	}

	e.ExpectWrite("default/web", rs("web-a", "10"))
	clk.t = clk.t.Add(ctrlutil.DefaultExpectationsTimeout + time.Second)
	if !satisfied(e, "default/web") {
		t.Fatal("expired expectations must be satisfied")
	}
	e.ExpectWrite("default/web", rs("web-a", "11"))
	if satisfied(e, "default/web") {
		t.Fatal("a write after the timeout must be expected again")
	}
	e.Delete("default/web")
	if !satisfied(e, "default/web") {
		t.Fatal("forgotten expectations must be satisfied")
	}
}
