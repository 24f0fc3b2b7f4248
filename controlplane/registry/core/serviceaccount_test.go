package core

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/registrytest"
)

func TestServiceAccount(t *testing.T) {
	k := ServiceAccount()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "builder"},
		Secrets: []corev1.ObjectReference{{Name: "tok", Namespace: "other", Kind: "Secret", UID: "u"}}}
	if err := registry.BeforeCreate(&k, sa); err != nil {
		t.Fatal(err)
	}
	if sa.Secrets[0] != (corev1.ObjectReference{Name: "tok"}) {
		t.Fatalf("secret reference not cleaned: %+v", sa.Secrets[0])
	}
	if got := fmt.Sprint(k.TableRow(sa)[:2]); got != "[builder 1]" {
		t.Fatalf("row %s", got)
	}
	if cols := k.TableColumns(); len(cols) != 3 || cols[1].Name != "Secrets" {
		t.Fatalf("columns %+v", cols)
	}
	registrytest.CheckTable(t, k, sa)
	for _, name := range []string{"Builder", "a_b", ""} {
		bad := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
		if err := registry.BeforeCreate(&k, bad); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	if ns := (&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "x"}}); registry.BeforeCreate(&k, ns) == nil {
		t.Error("a ServiceAccount without a namespace was accepted")
	}
}
