package rbac

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestClusterRoleBinding(t *testing.T) {
	binding := func(ref rbacv1.RoleRef, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:viewers"}, RoleRef: ref, Subjects: subjects}
	}
	view := rbacv1.RoleRef{Kind: "ClusterRole", Name: "view"}
	tests := []struct {
		name string
		obj  *rbacv1.ClusterRoleBinding
		want []string
	}{
		{"valid", binding(view, rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: "kube-system"}, rbacv1.Subject{Kind: "Group", Name: "system:authenticated"}), nil},
		{"role is not allowed", binding(rbacv1.RoleRef{Kind: "Role", Name: "r"}), []string{"FieldValueNotSupported:roleRef.kind"}},
		{"service account without namespace", binding(view, rbacv1.Subject{Kind: "ServiceAccount", Name: "default"}), []string{"FieldValueRequired:subjects[0].namespace"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := create(t, ClusterRoleBinding(), tc.obj); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	k := ClusterRoleBinding()
	if cols := k.TableColumns(); len(cols) != 6 || cols[1].Name != "Role" || cols[3].Priority != 1 {
		t.Fatalf("columns %+v", cols)
	}
}
