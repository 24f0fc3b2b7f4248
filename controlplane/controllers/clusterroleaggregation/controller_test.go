package clusterroleaggregation

import (
	"context"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/auth/rbac/validation"

	"github.com/orca-edge/orca/controlplane/auth/rbac/bootstrappolicy"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	regrbac "github.com/orca-edge/orca/controlplane/registry/rbac"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestAggregation checks that the default view, edit and admin roles
// gather their aggregate-to-* roles (view within edit within admin), and
// that a new role labelled aggregate-to-view joins all three and leaves
// them again when deleted.
func TestAggregation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := storetest.NewStore(t)
	reg := builtin.New()
	if err := bootstrappolicy.Reconcile(ctx, s, reg); err != nil {
		t.Fatal(err)
	}
	roles := store.NewInformer(s, regrbac.ClusterRoles)
	c := New(s, reg, roles)
	go roles.Run(ctx)
	go c.Run(ctx, 1)

	defaults := map[string][]rbacv1.PolicyRule{}
	for _, r := range bootstrappolicy.ClusterRoles() {
		defaults[r.Name] = r.Rules
	}
	rulesOf := func(name string) ([]rbacv1.PolicyRule, error) {
		o, err := s.Get(ctx, regrbac.ClusterRoles, "", name)
		if err != nil {
			return nil, err
		}
		return o.(*rbacv1.ClusterRole).Rules, nil
	}
	covers := func(role string, want ...[]rbacv1.PolicyRule) error {
		got, err := rulesOf(role)
		if err != nil {
			return err
		}
		for _, w := range want {
			if ok, missing := validation.Covers(got, w); !ok {
				return fmt.Errorf("%s misses %v", role, missing)
			}
		}
		return nil
	}
	view, edit, admin := defaults["system:aggregate-to-view"], defaults["system:aggregate-to-edit"], defaults["system:aggregate-to-admin"]
	storetest.Eventually(t, 10*time.Second, func() error {
		if err := covers("view", view); err != nil {
			return err
		}
		if err := covers("edit", view, edit); err != nil {
			return err
		}
		return covers("admin", view, edit, admin)
	})
	if ok, _ := validation.Covers(mustRules(t, rulesOf, "view"), edit); ok {
		t.Fatal("view holds edit's rules")
	}

	crd := []rbacv1.PolicyRule{{Verbs: []string{"get", "list"}, APIGroups: []string{"example.com"}, Resources: []string{"widgets"}}}
	extra := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "widgets-view", Labels: map[string]string{bootstrappolicy.AggregateToView: "true"}}, Rules: crd}
	if _, err := reg.Create(ctx, s, regrbac.ClusterRoles, extra); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		for _, r := range []string{"view", "edit", "admin"} {
			if err := covers(r, crd); err != nil {
				return err
			}
		}
		return nil
	})
	if _, err := s.Delete(ctx, regrbac.ClusterRoles, "", "widgets-view", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		for _, r := range []string{"view", "edit", "admin"} {
			if covers(r, crd) == nil {
				return fmt.Errorf("%s still holds the deleted role's rules", r)
			}
		}
		return nil
	})
}

func mustRules(t *testing.T, f func(string) ([]rbacv1.PolicyRule, error), name string) []rbacv1.PolicyRule {
	t.Helper()
	r, err := f(name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
