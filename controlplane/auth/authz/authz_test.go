package authz

import (
	"context"
	"net/http"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

func TestForbidden(t *testing.T) {
	jane := &user.DefaultInfo{Name: "jane"}
	for _, tc := range []struct {
		attrs  authorizer.AttributesRecord
		reason string
		want   string
	}{
		{authorizer.AttributesRecord{User: jane, Verb: "create", Resource: "pods", Namespace: "default", ResourceRequest: true}, "",
			`pods is forbidden: User "jane" cannot create resource "pods" in API group "" in the namespace "default"`},
		{authorizer.AttributesRecord{User: jane, Verb: "get", Resource: "nodes", Name: "n1", ResourceRequest: true}, "",
			`nodes "n1" is forbidden: User "jane" cannot get resource "nodes" in API group "" at the cluster scope`},
		{authorizer.AttributesRecord{User: jane, Verb: "update", APIGroup: "apps", Resource: "deployments", Subresource: "scale", Namespace: "d", Name: "web", ResourceRequest: true}, "no",
			`deployments.apps "web" is forbidden: User "jane" cannot update resource "deployments/scale" in API group "apps" in the namespace "d": no`},
		{authorizer.AttributesRecord{User: jane, Verb: "get", Path: "/metrics"}, "",
			`forbidden: User "jane" cannot get path "/metrics"`},
	} {
		err := Forbidden(tc.attrs, tc.reason)
		if !apierrors.IsForbidden(err) || err.Error() != tc.want {
			t.Errorf("Forbidden = %q, want %q", err.Error(), tc.want)
		}
	}
}

// adminImpersonates lets "admin" impersonate anything, "sa-only" only
// service accounts of namespace team.
var adminImpersonates = authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	switch {
	case a.GetVerb() != "impersonate":
	case a.GetUser().GetName() == "admin":
		return authorizer.DecisionAllow, "", nil
	case a.GetUser().GetName() == "sa-only" && a.GetResource() == "serviceaccounts" && a.GetNamespace() == "team":
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
})

func TestImpersonate(t *testing.T) {
	ctx := context.Background()
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	u, ok, err := Impersonate(ctx, adminImpersonates, admin, http.Header{})
	if err != nil || ok || u != user.Info(admin) {
		t.Fatalf("no headers: %v %v %v", u, ok, err)
	}
	u, ok, err = Impersonate(ctx, adminImpersonates, admin, hdr("Impersonate-User", "jane", "Impersonate-Group", "devs", "Impersonate-Extra-Scopes", "a", "Impersonate-Uid", "42"))
	if err != nil || !ok || u.GetName() != "jane" || !slices.Equal(u.GetGroups(), []string{"devs", user.AllAuthenticated}) ||
		!slices.Equal(u.GetExtra()["scopes"], []string{"a"}) || u.GetUID() != "42" {
		t.Fatalf("admin as jane: %+v %v %v", u, ok, err)
	}
	u, _, err = Impersonate(ctx, adminImpersonates, admin, hdr("Impersonate-User", "system:anonymous"))
	if err != nil || !slices.Equal(u.GetGroups(), []string{user.AllUnauthenticated}) {
		t.Fatalf("admin as anonymous: %+v %v", u, err)
	}
	sa := &user.DefaultInfo{Name: "sa-only"}
	u, _, err = Impersonate(ctx, adminImpersonates, sa, hdr("Impersonate-User", "system:serviceaccount:team:ci"))
	if err != nil || !slices.Equal(u.GetGroups(), []string{"system:serviceaccounts", "system:serviceaccounts:team", user.AllAuthenticated}) {
		t.Fatalf("sa-only as team:ci: %+v %v", u, err)
	}
	_, _, err = Impersonate(ctx, adminImpersonates, sa, hdr("Impersonate-User", "jane"))
	if want := `users "jane" is forbidden: User "sa-only" cannot impersonate resource "users" in API group "" at the cluster scope`; !apierrors.IsForbidden(err) || err.Error() != want {
		t.Fatalf("sa-only as jane: %v, want %s", err, want)
	}
	if _, _, err = Impersonate(ctx, adminImpersonates, admin, hdr("Impersonate-Group", "devs")); !apierrors.IsBadRequest(err) {
		t.Fatalf("group without user: %v, want 400", err)
	}
	h := hdr("Impersonate-User", "jane", "Impersonate-Extra-X", "1", "Accept", "json")
	DeleteImpersonationHeaders(h)
	if len(h) != 1 {
		t.Fatalf("headers left: %v", h)
	}
}

func TestUnionOrder(t *testing.T) {
	ctx := context.Background()
	a, err := New(Named{AuthorizerName: "Privileged", Authorizer: PrivilegedGroups(user.SystemPrivilegedGroup)},
		Named{AuthorizerName: "Node"}, // none configured: left out
		Named{AuthorizerName: "Other", Authorizer: authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			if a.GetUser().GetName() == "system:node:n1" && a.GetVerb() == "get" {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionNoOpinion, "", nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		u     user.Info
		attrs authorizer.AttributesRecord
		want  authorizer.Decision
	}{
		{&user.DefaultInfo{Name: "root", Groups: []string{user.SystemPrivilegedGroup}}, authorizer.AttributesRecord{Verb: "delete", Resource: "nodes", ResourceRequest: true}, authorizer.DecisionAllow},
		{&user.DefaultInfo{Name: "system:node:n1", Groups: []string{user.NodesGroup}}, authorizer.AttributesRecord{Verb: "get", Resource: "nodes", Name: "n1", ResourceRequest: true}, authorizer.DecisionAllow},
		{&user.DefaultInfo{Name: "system:node:n1", Groups: []string{user.NodesGroup}}, authorizer.AttributesRecord{Verb: "delete", Resource: "nodes", ResourceRequest: true}, authorizer.DecisionNoOpinion},
		{&user.DefaultInfo{Name: "jane"}, authorizer.AttributesRecord{Verb: "get", Resource: "nodes", ResourceRequest: true}, authorizer.DecisionNoOpinion},
	} {
		tc.attrs.User = tc.u
		if d, _, _ := a.Authorize(ctx, tc.attrs); d != tc.want {
			t.Errorf("%s %s %s: %v, want %v", tc.u.GetName(), tc.attrs.Verb, tc.attrs.Resource, d, tc.want)
		}
	}
}
