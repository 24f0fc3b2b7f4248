package authz

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// impersonation is one thing a request asks to act as.
type impersonation struct {
	kind      string // ServiceAccount, User, Group, UserExtra, UID
	namespace string // of a ServiceAccount
	name      string // the user, group, extra value or uid
	extraKey  string // of a UserExtra
}

// Impersonate is kube-apiserver's WithImpersonation filter
// (k8s.io/apiserver/pkg/endpoints/filters/impersonation), ported: it
// reads the Impersonate-User, Impersonate-Group (repeatable),
// Impersonate-Uid and Impersonate-Extra-<key> headers of h and returns
// the user the request then acts as, and whether it impersonates at all
// (no header: requestor, false). Each thing asked for must be allowed to
// requestor with verb "impersonate" on users, groups, serviceaccounts
// (a user system:serviceaccount:<ns>:<name>, in its namespace), uids, or
// userextras/<key> (group authentication.k8s.io for the last two):
// otherwise a 403 worded as Forbidden. Groups, extra or a uid without a
// user are a 400. The impersonated user gets system:authenticated (or
// system:unauthenticated for system:anonymous) unless the groups asked
// for include it; a ServiceAccount asked for without groups gets
// system:serviceaccounts and system:serviceaccounts:<ns>.
func Impersonate(ctx context.Context, a authorizer.Authorizer, requestor user.Info, h http.Header) (user.Info, bool, error) {
	reqs, err := impersonationRequests(h)
	if err != nil {
		return nil, false, err
	}
	if len(reqs) == 0 {
		return requestor, false, nil
	}
	groupsSpecified := len(h[authenticationv1.ImpersonateGroupHeader]) > 0
	var (
		username string
		groups   []string
		extra    = map[string][]string{}
		uid      string
	)
	for _, r := range reqs {
		attrs := authorizer.AttributesRecord{User: requestor, Verb: "impersonate", Namespace: r.namespace, Name: r.name, ResourceRequest: true}
		switch r.kind {
		case "ServiceAccount":
			attrs.Resource = "serviceaccounts"
			username = serviceaccount.MakeUsername(r.namespace, r.name)
			if !groupsSpecified {
				groups = serviceaccount.MakeGroupNames(r.namespace)
			}
		case "User":
			attrs.Resource = "users"
			username = r.name
		case "Group":
			attrs.Resource = "groups"
			groups = append(groups, r.name)
		case "UserExtra":
			attrs.APIGroup, attrs.APIVersion = authenticationv1.GroupName, "v1"
			attrs.Resource, attrs.Subresource = "userextras", r.extraKey
			extra[r.extraKey] = append(extra[r.extraKey], r.name)
		case "UID":
			attrs.APIGroup, attrs.APIVersion = authenticationv1.GroupName, "v1"
			attrs.Resource = "uids"
			uid = r.name
		}
		d, reason, err := a.Authorize(ctx, attrs)
		if err != nil || d != authorizer.DecisionAllow {
			return nil, true, Forbidden(attrs, reason)
		}
	}
	if username != user.Anonymous {
		if !slices.Contains(groups, user.AllAuthenticated) && !slices.Contains(groups, user.AllUnauthenticated) {
			groups = append(groups, user.AllAuthenticated)
		}
	} else if !slices.Contains(groups, user.AllUnauthenticated) {
		groups = append(groups, user.AllUnauthenticated)
	}
	return &user.DefaultInfo{Name: username, Groups: groups, Extra: extra, UID: uid}, true, nil
}

// DeleteImpersonationHeaders removes the impersonation headers from h, as
// the filter does once they are applied.
func DeleteImpersonationHeaders(h http.Header) {
	h.Del(authenticationv1.ImpersonateUserHeader)
	h.Del(authenticationv1.ImpersonateGroupHeader)
	h.Del(authenticationv1.ImpersonateUIDHeader)
	for name := range h {
		if strings.HasPrefix(name, authenticationv1.ImpersonateUserExtraHeaderPrefix) {
			h.Del(name)
		}
	}
}

func impersonationRequests(h http.Header) ([]impersonation, error) {
	var out []impersonation
	requested := h.Get(authenticationv1.ImpersonateUserHeader)
	hasUser := requested != ""
	if hasUser {
		if ns, name, err := serviceaccount.SplitUsername(requested); err == nil {
			out = append(out, impersonation{kind: "ServiceAccount", namespace: ns, name: name})
		} else {
			out = append(out, impersonation{kind: "User", name: requested})
		}
	}
	hasOthers := false
	for _, g := range h[authenticationv1.ImpersonateGroupHeader] {
		hasOthers = true
		out = append(out, impersonation{kind: "Group", name: g})
	}
	for name, values := range h {
		if !strings.HasPrefix(name, authenticationv1.ImpersonateUserExtraHeaderPrefix) {
			continue
		}
		hasOthers = true
		key := strings.ToLower(name[len(authenticationv1.ImpersonateUserExtraHeaderPrefix):])
		if k, err := url.PathUnescape(key); err == nil {
			key = k
		}
		for _, v := range values {
			out = append(out, impersonation{kind: "UserExtra", name: v, extraKey: key})
		}
	}
	if uid := h.Get(authenticationv1.ImpersonateUIDHeader); uid != "" {
		hasOthers = true
		out = append(out, impersonation{kind: "UID", name: uid})
	}
	if hasOthers && !hasUser {
		var asked []string
		for _, r := range out {
			asked = append(asked, r.kind+" "+r.name)
		}
		return nil, apierrors.NewBadRequest(fmt.Sprintf("requested %v without impersonating a user", asked))
	}
	return out, nil
}
