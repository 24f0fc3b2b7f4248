package rbac

import (
	"fmt"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRoleBinding(t *testing.T) {
	binding := func(ref rbacv1.RoleRef, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "read-pods"}, RoleRef: ref, Subjects: subjects}
	}
	role := rbacv1.RoleRef{Kind: "Role", Name: "pod-reader"} // apiGroup defaulted
	jane := rbacv1.Subject{Kind: "User", Name: "jane"}
	tests := []struct {
		name string
		obj  *rbacv1.RoleBinding
		want []string
	}{
		{"valid", binding(role, jane, rbacv1.Subject{Kind: "Group", Name: "devs"}, rbacv1.Subject{Kind: "ServiceAccount", Name: "default"}), nil},
		{"cluster role", binding(rbacv1.RoleRef{Kind: "ClusterRole", Name: "view"}, jane), nil},
		{"other group", binding(rbacv1.RoleRef{APIGroup: "example.com", Kind: "Role", Name: "r"}), []string{"FieldValueNotSupported:roleRef.apiGroup"}},
		{"other kind", binding(rbacv1.RoleRef{Kind: "Pod", Name: "r"}), []string{"FieldValueNotSupported:roleRef.kind"}},
		{"no role name", binding(rbacv1.RoleRef{Kind: "Role"}), []string{"FieldValueRequired:roleRef.name"}},
		{"bad subject kind", binding(role, rbacv1.Subject{Kind: "Robot", Name: "r2"}), []string{"FieldValueNotSupported:subjects[0].kind"}},
		{"service account with group", binding(role, rbacv1.Subject{Kind: "ServiceAccount", Name: "sa", APIGroup: "rbac.authorization.k8s.io"}),
			[]string{"FieldValueNotSupported:subjects[0].apiGroup"}},
		{"bad service account name", binding(role, rbacv1.Subject{Kind: "ServiceAccount", Name: "Not_Valid"}), []string{"FieldValueInvalid:subjects[0].name"}},
		{"user without name", binding(role, rbacv1.Subject{Kind: "User"}), []string{"FieldValueInvalid:subjects[0].name", "FieldValueRequired:subjects[0].name"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := create(t, RoleBinding(), tc.obj); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	b := binding(role, jane, rbacv1.Subject{Kind: "ServiceAccount", Name: "ci", Namespace: "team"}, rbacv1.Subject{Kind: "Group", Name: "devs"})
	if got := create(t, RoleBinding(), b); got != nil {
		t.Fatal(got)
	}
	if b.RoleRef.APIGroup != rbacv1.GroupName || b.Subjects[0].APIGroup != rbacv1.GroupName || b.Subjects[1].APIGroup != "" {
		t.Fatalf("defaults not applied: %+v %+v", b.RoleRef, b.Subjects)
	}
	if got := fmt.Sprintf("%q", row(RoleBinding(), b)[3:]); got != `["jane" "devs" "team/ci"]` {
		t.Fatalf("wide cells %s", got)
	}
	if got := row(RoleBinding(), b)[1]; got != "Role/pod-reader" {
		t.Fatalf("role cell %v", got)
	}
	changed := b.DeepCopy()
	changed.RoleRef.Name = "other"
	if got := update(t, RoleBinding(), changed, b); !slices.Equal(got, []string{"FieldValueInvalid:roleRef"}) {
		t.Fatalf("roleRef change: %v", got)
	}
	more := b.DeepCopy()
	more.Subjects = append(more.Subjects, rbacv1.Subject{Kind: "User", Name: "joe"})
	if got := update(t, RoleBinding(), more, b); got != nil {
		t.Fatalf("subjects change: %v", got)
	}
}
