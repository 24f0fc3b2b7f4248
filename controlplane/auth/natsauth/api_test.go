package natsauth_test

import (
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/orca-edge/orca/controlplane/auth/natsauth"
)

func TestIssuerRoles(t *testing.T) {
	auth, err := natsauth.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	iss := &natsauth.Issuer{Authority: auth, Servers: []string{"tls://10.0.0.1:4222"}, CABundle: []byte("PEM")}
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	node := &user.DefaultInfo{Name: "system:node:edge.1", Groups: []string{"system:nodes", user.AllAuthenticated}}
	jane := &user.DefaultInfo{Name: "jane", Groups: []string{user.AllAuthenticated}}
	admin := &user.DefaultInfo{Name: "system:admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}
	// A node that claims the node name in its user but not the group is
	// not a node.
	fake := &user.DefaultInfo{Name: "system:node:edge-2", Groups: []string{user.AllAuthenticated}}
	long := int64(10 * 365 * 24 * 3600)
	short := int64(60)
	for _, tc := range []struct {
		name     string
		u        user.Info
		spec     natsauth.NATSCredentialRequestSpec
		code     int32 // 0: issued
		user     string
		inbox    string
		maxTTL   time.Duration
		readOnly bool
	}{
		{name: "node gets its own node permissions", u: node, spec: natsauth.NATSCredentialRequestSpec{PublicKey: pub}, user: "system:node:edge.1", inbox: "_INBOX_edge_1", maxTTL: natsauth.NodeMaxExpiration},
		{name: "node asking for 10 years gets 1", u: node, spec: natsauth.NATSCredentialRequestSpec{PublicKey: pub, ExpirationSeconds: &long}, user: "system:node:edge.1", inbox: "_INBOX_edge_1", maxTTL: natsauth.NodeMaxExpiration},
		{name: "viewer", u: jane, spec: natsauth.NATSCredentialRequestSpec{PublicKey: pub, ReadOnly: true}, user: "orca-viewer:jane", inbox: "_INBOX", maxTTL: natsauth.ViewerExpiration, readOnly: true},
		{name: "read-write for a non-admin is forbidden", u: jane, spec: natsauth.NATSCredentialRequestSpec{PublicKey: pub}, code: 403},
		{name: "a user named like a node is no node", u: fake, spec: natsauth.NATSCredentialRequestSpec{PublicKey: pub}, code: 403},
		{name: "admin read-write", u: admin, spec: natsauth.NATSCredentialRequestSpec{PublicKey: pub}, user: "orca-admin:system:admin", inbox: natsauth.ControlPlaneInboxPrefix, maxTTL: natsauth.ViewerExpiration},
		{name: "not a user key", u: node, spec: natsauth.NATSCredentialRequestSpec{PublicKey: auth.Account()}, code: 422},
		{name: "too short", u: jane, spec: natsauth.NATSCredentialRequestSpec{PublicKey: pub, ReadOnly: true, ExpirationSeconds: &short}, code: 422},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &natsauth.NATSCredentialRequest{Spec: tc.spec}
			err := iss.Issue(tc.u, req)
			if tc.code != 0 {
				if s, ok := err.(apierrors.APIStatus); !ok || s.Status().Code != tc.code {
					t.Fatalf("err = %v, want a %d", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			st := req.Status
			if st.User != tc.user || st.InboxPrefix != tc.inbox || len(st.Servers) != 1 || string(st.CABundle) != "PEM" {
				t.Fatalf("status = %+v", st)
			}
			uc, err := jwt.DecodeUserClaims(st.JWT)
			if err != nil {
				t.Fatal(err)
			}
			if uc.Subject != pub || uc.Issuer != auth.Account() {
				t.Fatalf("JWT for %s by %s, want %s by the account", uc.Subject, uc.Issuer, pub)
			}
			if ttl := time.Until(time.Unix(uc.Expires, 0)); ttl > tc.maxTTL || ttl < tc.maxTTL-time.Hour {
				t.Fatalf("expires in %v, want about %v", ttl, tc.maxTTL)
			}
			if tc.readOnly != (len(uc.Pub.Deny) > 0) {
				t.Fatalf("publish permissions %+v", uc.Pub)
			}
		})
	}
}
