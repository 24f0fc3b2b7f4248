package bootstrappolicy

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/component-helpers/auth/rbac/validation"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
	regrbac "github.com/orca-edge/orca/controlplane/registry/rbac"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestReconcile checks that the defaults are created valid, that a second
// run writes nothing, that a default stripped of a rule or a subject gets
// it back while additions stay, and that autoupdate=false protects an
// edited default.
func TestReconcile(t *testing.T) {
	ctx := context.Background()
	s := storetest.NewStore(t)
	reg := builtin.New()
	if err := Reconcile(ctx, s, reg); err != nil {
		t.Fatal(err)
	}
	get := func(r store.Resource, name string) store.Object {
		t.Helper()
		o, err := s.Get(ctx, r, "", name)
		if err != nil {
			t.Fatalf("get %s %s: %v", r.Kind, name, err)
		}
		return o
	}
	for _, want := range ClusterRoles() {
		got := get(regrbac.ClusterRoles, want.Name).(*rbacv1.ClusterRole)
		if !equality.Semantic.DeepEqual(got.Rules, want.Rules) || got.Annotations[rbacv1.AutoUpdateAnnotationKey] != "true" {
			t.Errorf("clusterrole %s: rules %v annotations %v", want.Name, got.Rules, got.Annotations)
		}
	}
	for _, want := range ClusterRoleBindings() {
		got := get(regrbac.ClusterRoleBindings, want.Name).(*rbacv1.ClusterRoleBinding)
		if got.RoleRef != want.RoleRef || len(got.Subjects) != len(want.Subjects) {
			t.Errorf("clusterrolebinding %s: %v %v", want.Name, got.RoleRef, got.Subjects)
		}
	}
	rv := get(regrbac.ClusterRoles, "cluster-admin").GetResourceVersion()
	if err := Reconcile(ctx, s, reg); err != nil {
		t.Fatal(err)
	}
	if now := get(regrbac.ClusterRoles, "cluster-admin").GetResourceVersion(); now != rv {
		t.Errorf("second reconcile rewrote cluster-admin: %s -> %s", rv, now)
	}

	// Strip a default rule, add one of ours; strip the binding's subject, add one.
	_, err := reg.GuaranteedUpdate(ctx, s, regrbac.ClusterRoles, "", "system:basic-user", nil, func(cur store.Object) (store.Object, error) {
		r := cur.(*rbacv1.ClusterRole)
		r.Rules = []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}}
		return r, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = reg.GuaranteedUpdate(ctx, s, regrbac.ClusterRoleBindings, "", "cluster-admin", nil, func(cur store.Object) (store.Object, error) {
		b := cur.(*rbacv1.ClusterRoleBinding)
		b.Subjects = []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "alice"}}
		return b, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Protect system:discovery and empty it.
	_, err = reg.GuaranteedUpdate(ctx, s, regrbac.ClusterRoles, "", "system:discovery", nil, func(cur store.Object) (store.Object, error) {
		r := cur.(*rbacv1.ClusterRole)
		r.Annotations[rbacv1.AutoUpdateAnnotationKey] = "false"
		r.Rules = nil
		return r, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := Reconcile(ctx, s, reg); err != nil {
		t.Fatal(err)
	}
	basic := get(regrbac.ClusterRoles, "system:basic-user").(*rbacv1.ClusterRole)
	covers, _ := validation.Covers(basic.Rules, ClusterRoles()[3].Rules)
	if basic.Rules[0].Resources[0] != "configmaps" || !covers {
		t.Errorf("system:basic-user after reconcile: %v, want the added rule and both defaults", basic.Rules)
	}
	admins := get(regrbac.ClusterRoleBindings, "cluster-admin").(*rbacv1.ClusterRoleBinding)
	if len(admins.Subjects) != 2 {
		t.Errorf("cluster-admin binding after reconcile: %v, want alice and system:masters", admins.Subjects)
	}
	if d := get(regrbac.ClusterRoles, "system:discovery").(*rbacv1.ClusterRole); len(d.Rules) != 0 {
		t.Errorf("protected system:discovery was reconciled: %v", d.Rules)
	}

	// A binding whose roleRef was replaced (delete + create by hand) is
	// recreated with the default roleRef.
	b := get(regrbac.ClusterRoleBindings, "system:discovery").(*rbacv1.ClusterRoleBinding)
	if _, err := s.Delete(ctx, regrbac.ClusterRoleBindings, "", b.Name, b.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	b = b.DeepCopy()
	b.ResourceVersion, b.UID = "", ""
	b.RoleRef.Name = "view"
	if _, err := reg.Create(ctx, s, regrbac.ClusterRoleBindings, b); err != nil {
		t.Fatal(err)
	}
	if err := Reconcile(ctx, s, reg); err != nil {
		t.Fatal(err)
	}
	if got := get(regrbac.ClusterRoleBindings, "system:discovery").(*rbacv1.ClusterRoleBinding); got.RoleRef.Name != "system:discovery" {
		t.Errorf("system:discovery binding after reconcile refers to %q, want system:discovery", got.RoleRef.Name)
	}
}
