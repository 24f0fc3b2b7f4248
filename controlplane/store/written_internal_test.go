package store

import (
	"context"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWrittenIsTheDecodedWrite checks that the object a write returns
// from the watch cache (written) is the one decoding its bytes gives:
// JSON's rounding of times and quantities included, with its own copy.
func TestWrittenIsTheDecodedWrite(t *testing.T) {
	ns, err := StartEmbedded(EmbeddedConfig{Port: -1, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st, err := New(nc, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ctx := context.Background()
	if _, _, err := st.List(ctx, Pods, ""); err != nil { // starts the watch cache
		t.Fatal(err)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", CreationTimestamp: metav1.NewTime(time.Unix(100, 123456789))},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000m")}}}}},
	}
	out, err := st.Create(ctx, Pods, p)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := ParseResourceVersion(out.GetResourceVersion())
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.cache(ctx, Pods, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.waitFresh(ctx); err != nil {
		t.Fatal(err)
	}
	data, err := Encode(Pods, p)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Decode(Pods, data, rev)
	if err != nil {
		t.Fatal(err)
	}
	cached := c.object(Key("default", "p"))
	if cached == nil || cached.GetResourceVersion() != strconv.FormatUint(rev, 10) {
		t.Fatalf("the watch cache holds %v, want revision %d", cached, rev)
	}
	for _, tc := range []struct {
		name string
		got  func() (Object, error)
	}{
		{"created", func() (Object, error) { return out, nil }},
		{"written at the cached revision", func() (Object, error) { return st.written(Pods, Key("default", "p"), data, rev) }},
		{"written at another revision", func() (Object, error) { return st.written(Pods, Key("default", "p"), data, rev+1) }},
	} {
		got, err := tc.got()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.name == "written at another revision" {
			want.SetResourceVersion(strconv.FormatUint(rev+1, 10))
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got\n%#v\nwant\n%#v", tc.name, got, want)
		}
		if got == cached {
			t.Errorf("%s: returned the watch cache's own object", tc.name)
		}
	}
	out.(*corev1.Pod).Labels = map[string]string{"changed": "yes"}
	if cached.GetLabels() != nil {
		t.Error("changing the created object changed the watch cache's")
	}
}
