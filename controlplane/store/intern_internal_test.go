package store

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func decodePod(t *testing.T, data []byte) *corev1.Pod {
	t.Helper()
	o, err := Decode(Pods, data, 1)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*corev1.Pod)
}

func samePointer(a, b any) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// TestInternerKeepsObjectsEqual: an interned object is reflect.DeepEqual
// to the same bytes decoded without interning, also when an earlier
// object had maps that print alike but are not equal.
func TestInternerKeepsObjectsEqual(t *testing.T) {
	in := newInterner()
	for i := range 3 {
		for _, running := range []bool{false, true} {
			data := benchPodJSON(t, i, running)
			p := decodePod(t, data)
			in.object(p)
			if want := decodePod(t, data); !reflect.DeepEqual(p, want) {
				t.Fatalf("pod %d (running %t): interned object differs from its decode", i, running)
			}
		}
	}
	// "0.1" and "100m" print alike; their decoded Quantities differ (one
	// keeps its string), so the second must not get the first one's map.
	a := strings.Replace(string(benchPodJSON(t, 10, true)), `"cpu":"100m"`, `"cpu":"0.1"`, -1)
	pa := decodePod(t, []byte(a))
	in.object(pa)
	pb := decodePod(t, benchPodJSON(t, 11, true))
	in.object(pb)
	if want := decodePod(t, []byte(a)); !reflect.DeepEqual(pa, want) {
		t.Fatal("pod with cpu 0.1: interned object differs from its decode")
	}
	if want := decodePod(t, benchPodJSON(t, 11, true)); !reflect.DeepEqual(pb, want) {
		t.Fatal("pod with cpu 100m after one with 0.1: interned object differs from its decode")
	}
	if q := pb.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; q.String() != "100m" || q.Cmp(resource.MustParse("0.1")) != 0 {
		t.Fatalf("cpu request %s", q.String())
	}
}

// TestInternerSharesEqualMaps: pods of one template share their labels
// and resource maps and their repeated strings; a DeepCopy shares no map.
func TestInternerSharesEqualMaps(t *testing.T) {
	in := newInterner()
	p1, p2 := decodePod(t, benchPodJSON(t, 1, true)), decodePod(t, benchPodJSON(t, 2, true))
	in.object(p1)
	in.object(p2)
	if !samePointer(p1.Labels, p2.Labels) {
		t.Error("labels not shared")
	}
	c1, c2 := p1.Spec.Containers[0].Resources, p2.Spec.Containers[0].Resources
	if !samePointer(c1.Limits, c2.Limits) || !samePointer(c1.Requests, c2.Requests) {
		t.Error("resource maps not shared")
	}
	if p1.Spec.Containers[0].Image != p2.Spec.Containers[0].Image || !sameString(p1.Spec.Containers[0].Image, p2.Spec.Containers[0].Image) {
		t.Error("image string not shared")
	}
	cp := p1.DeepCopy()
	if samePointer(cp.Labels, p1.Labels) || samePointer(cp.Spec.Containers[0].Resources.Limits, c1.Limits) {
		t.Error("a DeepCopy shares a map with the cached object")
	}
	// Different labels are not shared.
	p3 := decodePod(t, []byte(strings.Replace(string(benchPodJSON(t, 3, true)), `"app":"footprint"`, `"app":"other"`, 1)))
	in.object(p3)
	if samePointer(p3.Labels, p1.Labels) || p3.Labels["app"] != "other" {
		t.Errorf("labels %v shared with %v", p3.Labels, p1.Labels)
	}
}

// sameString reports whether a and b are one string in memory.
func sameString(a, b string) bool { return a != "" && stringData(a) == stringData(b) }

// TestInternerTablesBounded: objects whose maps never repeat do not grow
// the tables past maxInterned.
func TestInternerTablesBounded(t *testing.T) {
	in := newInterner()
	for i := range maxInterned + 10 {
		in.stringMap(map[string]string{"k": fmt.Sprint(i)})
		in.resourceList(corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(int64(i), resource.DecimalSI)})
	}
	if len(in.labels) > maxInterned || len(in.resources) > maxInterned {
		t.Fatalf("tables hold %d and %d maps, at most %d allowed", len(in.labels), len(in.resources), maxInterned)
	}
}

func stringData(s string) *byte { return unsafe.StringData(s) }
