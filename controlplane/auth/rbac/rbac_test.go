package rbac

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
	regrbac "github.com/orca-edge/orca/controlplane/registry/rbac"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func res(verb, group, resource, sub, ns, name string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{Verb: verb, APIGroup: group, Resource: resource, Subresource: sub, Namespace: ns, Name: name, ResourceRequest: true}
}

// TestRuleAllows is Kubernetes' rule matching, case by case.
func TestRuleAllows(t *testing.T) {
	rule := func(verbs, groups, resources, names []string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources, ResourceNames: names}
	}
	s := func(v ...string) []string { return v }
	for _, tc := range []struct {
		name  string
		rule  rbacv1.PolicyRule
		attrs authorizer.AttributesRecord
		want  bool
	}{
		{"exact", rule(s("get"), s(""), s("pods"), nil), res("get", "", "pods", "", "default", "web"), true},
		{"other verb", rule(s("get"), s(""), s("pods"), nil), res("create", "", "pods", "", "default", ""), false},
		{"verb star", rule(s("*"), s(""), s("pods"), nil), res("deletecollection", "", "pods", "", "default", ""), true},
		{"other group", rule(s("get"), s("apps"), s("pods"), nil), res("get", "", "pods", "", "", ""), false},
		{"group star", rule(s("get"), s("*"), s("deployments"), nil), res("get", "apps", "deployments", "", "", ""), true},
		{"resource star", rule(s("get"), s(""), s("*"), nil), res("get", "", "pods", "log", "", ""), true},
		{"subresource needs its own rule", rule(s("get"), s(""), s("pods"), nil), res("get", "", "pods", "log", "d", "web"), false},
		{"subresource rule", rule(s("get"), s(""), s("pods/log"), nil), res("get", "", "pods", "log", "d", "web"), true},
		{"subresource rule is not the resource", rule(s("get"), s(""), s("pods/log"), nil), res("get", "", "pods", "", "d", "web"), false},
		{"star subresource", rule(s("update"), s("apps"), s("*/scale"), nil), res("update", "apps", "deployments", "scale", "d", "x"), true},
		{"star subresource other", rule(s("update"), s("apps"), s("*/scale"), nil), res("update", "apps", "deployments", "status", "d", "x"), false},
		{"star subresource not main", rule(s("update"), s("apps"), s("*/scale"), nil), res("update", "apps", "deployments", "", "d", "x"), false},
		{"resource name", rule(s("get"), s(""), s("secrets"), s("a")), res("get", "", "secrets", "", "d", "a"), true},
		{"resource name other", rule(s("get"), s(""), s("secrets"), s("a")), res("get", "", "secrets", "", "d", "b"), false},
		{"resource name list", rule(s("list"), s(""), s("secrets"), s("a")), res("list", "", "secrets", "", "d", ""), false},
		{"url exact", rbacv1.PolicyRule{Verbs: s("get"), NonResourceURLs: s("/healthz")}, authorizer.AttributesRecord{Verb: "get", Path: "/healthz"}, true},
		{"url prefix", rbacv1.PolicyRule{Verbs: s("get"), NonResourceURLs: s("/healthz/*")}, authorizer.AttributesRecord{Verb: "get", Path: "/healthz/ping"}, true},
		{"url prefix not itself", rbacv1.PolicyRule{Verbs: s("get"), NonResourceURLs: s("/healthz/*")}, authorizer.AttributesRecord{Verb: "get", Path: "/healthz"}, false},
		{"url star", rbacv1.PolicyRule{Verbs: s("*"), NonResourceURLs: s("*")}, authorizer.AttributesRecord{Verb: "post", Path: "/anything"}, true},
		{"url rule is no resource rule", rbacv1.PolicyRule{Verbs: s("get"), NonResourceURLs: s("*")}, res("get", "", "pods", "", "", ""), false},
		{"resource rule is no url rule", rule(s("get"), s("*"), s("*"), nil), authorizer.AttributesRecord{Verb: "get", Path: "/version"}, false},
	} {
		if got := RuleAllows(tc.attrs, &tc.rule); got != tc.want {
			t.Errorf("%s: RuleAllows = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// env is a store with the RBAC kinds and an authorizer over it.
type env struct {
	t   *testing.T
	ctx context.Context
	s   *store.Store
	a   *Authorizer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a := NewFromStore(s)
	go a.Run(ctx)
	if !a.WaitForSync(ctx) {
		t.Fatal("informers did not sync")
	}
	return &env{t: t, ctx: ctx, s: s, a: a}
}

func (e *env) create(r store.Resource, obj store.Object) {
	e.t.Helper()
	if _, err := builtin.New().Create(e.ctx, e.s, r, obj); err != nil {
		e.t.Fatalf("create %s %s: %v", r.Kind, obj.GetName(), err)
	}
}

// eventually polls until the authorizer decides want for u.
func (e *env) eventually(u user.Info, attrs authorizer.AttributesRecord, want authorizer.Decision) {
	e.t.Helper()
	attrs.User = u
	storetest.Eventually(e.t, 10*time.Second, func() error {
		d, reason, err := e.a.Authorize(e.ctx, attrs)
		if err != nil {
			return err
		}
		if d != want {
			return fmt.Errorf("%+v: decision %v (%s), want %v", attrs, d, reason, want)
		}
		return nil
	})
}

func clusterRole(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
}

func subject(kind, name, ns string) rbacv1.Subject {
	s := rbacv1.Subject{Kind: kind, Name: name, Namespace: ns}
	if kind != rbacv1.ServiceAccountKind {
		s.APIGroup = rbacv1.GroupName
	}
	return s
}

// TestAuthorizeBindings checks which bindings grant what: a
// ClusterRoleBinding everywhere, a RoleBinding of a ClusterRole or a Role
// only in its namespace, subjects by user, group and ServiceAccount, and
// the reason naming the binding.
func TestAuthorizeBindings(t *testing.T) {
	e := newEnv(t)
	read := rbacv1.PolicyRule{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"}}
	write := rbacv1.PolicyRule{Verbs: []string{"create"}, APIGroups: []string{"apps"}, Resources: []string{"deployments"}}
	e.create(regrbac.ClusterRoles, clusterRole("pod-reader", read))
	e.create(regrbac.ClusterRoles, clusterRole("deployer", write))
	e.create(regrbac.Roles, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "cm-writer"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"update"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"settings"}}}})
	e.create(regrbac.ClusterRoleBindings, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "readers"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "pod-reader"}, Subjects: []rbacv1.Subject{subject("Group", "readers", "")}})
	e.create(regrbac.RoleBindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "deployers"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "deployer"}, Subjects: []rbacv1.Subject{subject("User", "jane", ""), subject("ServiceAccount", "ci", "")}})
	e.create(regrbac.RoleBindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "settings"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "cm-writer"}, Subjects: []rbacv1.Subject{subject("User", "jane", "")}})
	e.create(regrbac.RoleBindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "dangling"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "missing"}, Subjects: []rbacv1.Subject{subject("User", "bob", "")}})

	jane := &user.DefaultInfo{Name: "jane", Groups: []string{user.AllAuthenticated}}
	reader := &user.DefaultInfo{Name: "rita", Groups: []string{"readers", user.AllAuthenticated}}
	ci := &user.DefaultInfo{Name: "system:serviceaccount:team:ci", Groups: []string{"system:serviceaccounts"}}
	ciElsewhere := &user.DefaultInfo{Name: "system:serviceaccount:other:ci"}
	allow, none := authorizer.DecisionAllow, authorizer.DecisionNoOpinion

	e.eventually(reader, res("list", "", "pods", "", "", ""), allow) // cluster-wide
	e.eventually(reader, res("get", "", "pods", "", "any", "p"), allow)
	e.eventually(reader, res("delete", "", "pods", "", "any", "p"), none)
	e.eventually(jane, res("get", "", "pods", "", "team", "p"), none)
	e.eventually(jane, res("create", "apps", "deployments", "", "team", ""), allow)
	e.eventually(jane, res("create", "apps", "deployments", "", "other", ""), none)
	e.eventually(jane, res("create", "apps", "deployments", "", "", ""), none) // a RoleBinding is never cluster-wide
	e.eventually(ci, res("create", "apps", "deployments", "", "team", ""), allow)
	e.eventually(ciElsewhere, res("create", "apps", "deployments", "", "team", ""), none)
	e.eventually(jane, res("update", "", "configmaps", "", "team", "settings"), allow)
	e.eventually(jane, res("update", "", "configmaps", "", "team", "other"), none)

	_, reason, _ := e.a.Authorize(e.ctx, authorizer.AttributesRecord{User: jane, Verb: "create", APIGroup: "apps", Resource: "deployments", Namespace: "team", ResourceRequest: true})
	if want := `RBAC: allowed by RoleBinding "deployers/team" of ClusterRole "deployer" to User "jane"`; reason != want {
		t.Errorf("reason %q, want %q", reason, want)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		d, reason, _ := e.a.Authorize(e.ctx, authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "bob"}, Verb: "get", Resource: "pods", Namespace: "team", ResourceRequest: true})
		if d != none || !strings.Contains(reason, `role.rbac.authorization.k8s.io "missing" not found`) {
			return fmt.Errorf("dangling binding: %v %q, want no opinion naming the missing role", d, reason)
		}
		return nil
	})

	rr, nrr, incomplete, err := e.a.RulesFor(e.ctx, jane, "team")
	if err != nil || incomplete || len(rr) != 2 || len(nrr) != 0 {
		t.Errorf("RulesFor jane in team: %d resource rules, %d URL rules, incomplete %v, err %v; want 2, 0", len(rr), len(nrr), incomplete, err)
	}
}

// TestAdmitWrite checks escalation prevention: a user may create a role
// or binding only with rules they hold, unless they may escalate or bind;
// system:masters may do anything.
func TestAdmitWrite(t *testing.T) {
	e := newEnv(t)
	podsRW := rbacv1.PolicyRule{Verbs: []string{"get", "create"}, APIGroups: []string{""}, Resources: []string{"pods"}}
	secrets := rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"secrets"}}
	e.create(regrbac.ClusterRoles, clusterRole("pods-rw", podsRW))
	e.create(regrbac.ClusterRoles, clusterRole("secrets", secrets))
	e.create(regrbac.ClusterRoles, clusterRole("binder", rbacv1.PolicyRule{Verbs: []string{"bind"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"}, ResourceNames: []string{"secrets"}}))
	e.create(regrbac.RoleBindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "jane"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "pods-rw"}, Subjects: []rbacv1.Subject{subject("User", "jane", "")}})
	e.create(regrbac.RoleBindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "jane-binder"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "binder"}, Subjects: []rbacv1.Subject{subject("User", "jane", "")}})
	jane := &user.DefaultInfo{Name: "jane", Groups: []string{user.AllAuthenticated}}
	e.eventually(jane, res("create", "", "pods", "", "team", ""), authorizer.DecisionAllow)
	e.eventually(jane, authorizer.AttributesRecord{Verb: "bind", APIGroup: rbacv1.GroupName, Resource: "clusterroles", Name: "secrets", Namespace: "team", ResourceRequest: true}, authorizer.DecisionAllow)
	r := e.a.Resolver()

	role := func(rules ...rbacv1.PolicyRule) *rbacv1.Role {
		return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "r"}, Rules: rules}
	}
	if err := r.AdmitWrite(e.ctx, e.a, jane, role(podsRW), nil); err != nil {
		t.Errorf("role with held rules: %v", err)
	}
	err := r.AdmitWrite(e.ctx, e.a, jane, role(podsRW, secrets), nil)
	want := `roles.rbac.authorization.k8s.io "r" is forbidden: user "jane" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}`
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Errorf("role with a secrets rule: %v\nwant %s", err, want)
	}
	// The same role elsewhere: jane holds nothing there.
	other := role(podsRW)
	other.Namespace = "other"
	if err := r.AdmitWrite(e.ctx, e.a, jane, other, nil); !apierrors.IsForbidden(err) {
		t.Errorf("role in another namespace: %v, want 403", err)
	}
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}
	if err := r.AdmitWrite(e.ctx, e.a, admin, role(rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}), nil); err != nil {
		t.Errorf("system:masters: %v", err)
	}
	binding := func(role string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "b"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: []rbacv1.Subject{subject("User", "joe", "")}}
	}
	if err := r.AdmitWrite(e.ctx, e.a, jane, binding("pods-rw"), nil); err != nil {
		t.Errorf("binding a role whose rules are held: %v", err)
	}
	if err := r.AdmitWrite(e.ctx, e.a, jane, binding("secrets"), nil); err != nil {
		t.Errorf("binding a role with bind permission: %v", err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "b"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "pods-rw"}, Subjects: []rbacv1.Subject{subject("User", "joe", "")}}
	if err := r.AdmitWrite(e.ctx, e.a, jane, crb, nil); !apierrors.IsForbidden(err) {
		t.Errorf("cluster-wide binding of rules held in one namespace: %v, want 403", err)
	}
	agg := clusterRole("agg")
	agg.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"x": "y"}}}}
	if err := r.AdmitWrite(e.ctx, e.a, jane, agg, nil); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "must have cluster-admin privileges to use the aggregationRule") {
		t.Errorf("aggregationRule by jane: %v, want 403", err)
	}
	// An update that only changes finalizers passes whatever the rules.
	held := role(secrets)
	gc := held.DeepCopy()
	gc.Finalizers = []string{"x"}
	if err := r.AdmitWrite(e.ctx, e.a, jane, gc, held); err != nil {
		t.Errorf("finalizer-only update: %v", err)
	}
}
