package bootstrap

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func storeGetter(st *store.Store) SecretGetter {
	return func(ctx context.Context, ns, name string) (*corev1.Secret, error) {
		obj, err := st.Get(ctx, store.Secrets, ns, name)
		if err != nil {
			return nil, err
		}
		return obj.(*corev1.Secret), nil
	}
}

func TestGenerateAndParse(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		tok, err := GenerateToken()
		if err != nil {
			t.Fatal(err)
		}
		id, secret, err := ParseToken(tok)
		if err != nil || len(id) != 6 || len(secret) != 16 || seen[tok] {
			t.Fatalf("token %q: %v", tok, err)
		}
		seen[tok] = true
	}
	for _, bad := range []string{"", "abcdef", "abcdef.0123456789abcde", "ABCDEF.0123456789abcdef", "abcdef.0123456789abcdef\n", "abcdef:0123456789abcdef"} {
		if _, _, err := ParseToken(bad); err == nil {
			t.Errorf("%q parses", bad)
		}
	}
	if _, err := Secret("abcdef.0123456789abcdef", TokenOptions{ExtraGroups: []string{"system:masters"}}, time.Now()); err == nil {
		t.Error("extra group system:masters accepted")
	}
	if _, err := Secret("abcdef.0123456789abcdef", TokenOptions{Usages: []string{"root"}}, time.Now()); err == nil {
		t.Error("usage root accepted")
	}
}

// A token authenticates as system:bootstrap:<id> while its Secret says
// so, and never once it expired, lost the authentication usage, or its
// secret differs.
func TestAuthenticator(t *testing.T) {
	st := storetest.NewStore(t)
	ctx := context.Background()
	a := NewAuthenticator(storeGetter(st))
	const tok = "abcdef.0123456789abcdef"
	s, err := Secret(tok, TokenOptions{TTL: time.Hour, ExtraGroups: []string{"system:bootstrappers:edge"}, Description: "join"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, store.Secrets, s); err != nil {
		t.Fatal(err)
	}
	resp, ok, err := a.AuthenticateToken(ctx, tok)
	if !ok || err != nil {
		t.Fatalf("authenticate: %v %v", ok, err)
	}
	if resp.User.GetName() != "system:bootstrap:abcdef" || strings.Join(resp.User.GetGroups(), ",") != "system:bootstrappers,system:bootstrappers:edge" {
		t.Fatalf("user %q groups %v", resp.User.GetName(), resp.User.GetGroups())
	}
	for _, other := range []string{"abcdef.0123456789abcdee", "zzzzzz.0123456789abcdef", "not-a-token"} {
		if _, ok, err := a.AuthenticateToken(ctx, other); ok || err != nil {
			t.Fatalf("%q: %v %v", other, ok, err)
		}
	}
	a.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, ok, _ := a.AuthenticateToken(ctx, tok); ok {
		t.Fatal("expired token authenticates")
	}
	a.now = time.Now
	obj, _ := st.Get(ctx, store.Secrets, SecretNamespace, SecretPrefix+"abcdef")
	sec := obj.(*corev1.Secret)
	delete(sec.Data, UsagePrefix+"authentication")
	update(t, st, sec)
	if _, ok, _ := a.AuthenticateToken(ctx, tok); ok {
		t.Fatal("a signing-only token authenticates")
	}
	sec.Data[UsagePrefix+"authentication"] = []byte("true")
	sec.Type = corev1.SecretTypeOpaque
	update(t, st, sec)
	if _, ok, _ := a.AuthenticateToken(ctx, tok); ok {
		t.Fatal("an Opaque secret authenticates")
	}
	sec.Type = SecretType
	sec.Data[ExtraGroupsKey] = []byte("system:masters")
	update(t, st, sec)
	if _, ok, _ := a.AuthenticateToken(ctx, tok); ok {
		t.Fatal("a token with group system:masters authenticates")
	}
}

// update writes sec and keeps its new resourceVersion.
func update(t *testing.T, st *store.Store, sec *corev1.Secret) {
	t.Helper()
	out, err := st.Update(context.Background(), store.Secrets, sec)
	if err != nil {
		t.Fatal(err)
	}
	sec.ResourceVersion = out.GetResourceVersion()
}
