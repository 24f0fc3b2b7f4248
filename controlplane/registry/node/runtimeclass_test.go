package node

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
)

func TestRuntimeClass(t *testing.T) {
	rc := func(handler string) *nodev1.RuntimeClass {
		return &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "wasm"}, Handler: handler}
	}
	registrytest.Run(t, RuntimeClass(), []registrytest.Case{
		{Name: "valid", Obj: rc("wasm")},
		{Name: "handler is a DNS label", Obj: rc("Wasm_1"), Errors: []string{"FieldValueInvalid:handler"}},
		{Name: "bad overhead", Obj: &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "wasm"}, Handler: "wasm",
			Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("-1Mi")}}},
			Errors: []string{"FieldValueInvalid:overhead.podFixed[memory]"}},
		{Name: "handler immutable", Old: rc("wasm"), Obj: rc("runc"), Errors: []string{"FieldValueInvalid:handler"}},
		{Name: "cluster-scoped", Obj: &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "wasm", Namespace: "default"}, Handler: "wasm"}},
	})
	registrytest.CheckTable(t, RuntimeClass(), rc("wasm"))
	if row := RuntimeClass().Row(rc("wasm")); row[1] != "wasm" {
		t.Errorf("row %v", row)
	}
}
