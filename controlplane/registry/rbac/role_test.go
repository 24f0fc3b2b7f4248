package rbac

import (
	"fmt"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRole(t *testing.T) {
	role := func(name string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
		return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Rules: rules}
	}
	read := rbacv1.PolicyRule{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"pods"}}
	tests := []struct {
		name string
		obj  *rbacv1.Role
		want []string
	}{
		{"valid", role("pod-reader", read), nil},
		{"colon in name", role("system:reader", read), nil},
		{"slash in name", role("a/b", read), []string{"FieldValueInvalid:metadata.name"}},
		{"no verbs", role("r", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}}), []string{"FieldValueRequired:rules[0].verbs"}},
		{"no groups or resources", role("r", rbacv1.PolicyRule{Verbs: []string{"get"}}),
			[]string{"FieldValueRequired:rules[0].apiGroups", "FieldValueRequired:rules[0].resources"}},
		{"names over two resources", role("r", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods", "secrets"}, ResourceNames: []string{"x"}}),
			[]string{"FieldValueRequired:rules[0].resourceNames"}},
		{"non-resource URL in a Role", role("r", rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}),
			[]string{"FieldValueInvalid:rules[0].nonResourceURLs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := create(t, Role(), tc.obj); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	if got := fmt.Sprint(row(Role(), role("pod-reader", read))); got != "[pod-reader 2026-01-02T03:04:05Z]" {
		t.Fatalf("row %s", got)
	}
	k := Role()
	if cols := k.TableColumns(); len(cols) != 2 || cols[1].Name != "Created At" {
		t.Fatalf("columns %+v", cols)
	}
}
