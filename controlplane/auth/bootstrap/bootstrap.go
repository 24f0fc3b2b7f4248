// Package bootstrap holds bootstrap tokens, as Kubernetes'
// k8s.io/cluster-bootstrap and its bootstrap token authenticator
// (plugin/pkg/auth/authenticator/token/bootstrap): a token
// "<id>.<secret>" ([a-z0-9]{6}.[a-z0-9]{16}) is a Secret
// "bootstrap-token-<id>" of type bootstrap.kubernetes.io/token in
// kube-system; while it has not expired and allows authentication it
// authenticates as user system:bootstrap:<id> in group system:bootstrappers
// (and its auth-extra-groups), which is what a joining node needs to ask
// for its certificate (a CertificateSigningRequest) and nothing more.
package bootstrap

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

// The Secret layout of a bootstrap token, as k8s.io/cluster-bootstrap/token/api.
const (
	// SecretNamespace holds every bootstrap token Secret.
	SecretNamespace = "kube-system"
	// SecretPrefix + token ID is the Secret's name.
	SecretPrefix = "bootstrap-token-"
	// SecretType is the Secrets' type.
	SecretType corev1.SecretType = "bootstrap.kubernetes.io/token"

	DescriptionKey = "description"
	TokenIDKey     = "token-id"
	TokenSecretKey = "token-secret"
	// ExpirationKey holds an RFC 3339 time after which the token is void
	// (and the tokencleaner deletes the Secret). Absent: never expires.
	ExpirationKey = "expiration"
	// UsagePrefix + usage ("authentication", "signing") = "true" allows
	// the usage.
	UsagePrefix = "usage-bootstrap-"
	// ExtraGroupsKey is a comma-separated list of groups, each matching
	// GroupPattern, added to system:bootstrappers.
	ExtraGroupsKey = "auth-extra-groups"

	// UserPrefix + token ID is the user a token authenticates as.
	UserPrefix = "system:bootstrap:"
	// DefaultGroup is every bootstrap token's group.
	DefaultGroup = "system:bootstrappers"
)

// Usages are the usages a token may allow, as kubeadm's.
var Usages = []string{"signing", "authentication"}

var (
	tokenRE   = regexp.MustCompile(`\A([a-z0-9]{6})\.([a-z0-9]{16})\z`)
	tokenIDRE = regexp.MustCompile(`\A[a-z0-9]{6}\z`)
	// GroupPattern is what an extra group must match.
	GroupPattern = regexp.MustCompile(`\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z`)
)

// ParseToken splits "<id>.<secret>" and fails when s is not a bootstrap
// token (the error never repeats the secret).
func ParseToken(s string) (id, secret string, err error) {
	m := tokenRE.FindStringSubmatch(s)
	if m == nil {
		return "", "", fmt.Errorf("the bootstrap token does not match the pattern %q", `[a-z0-9]{6}.[a-z0-9]{16}`)
	}
	return m[1], m[2], nil
}

// IsValidTokenID reports whether id is a token ID ([a-z0-9]{6}).
func IsValidTokenID(id string) bool { return tokenIDRE.MatchString(id) }

// GenerateToken returns a random token "<id>.<secret>" (crypto/rand), as
// kubeadm token generate.
func GenerateToken() (string, error) {
	id, err := randomString(6)
	if err != nil {
		return "", err
	}
	secret, err := randomString(16)
	if err != nil {
		return "", err
	}
	return id + "." + secret, nil
}

const tokenChars = "0123456789abcdefghijklmnopqrstuvwxyz"

// randomString returns n characters of tokenChars, uniformly drawn.
func randomString(n int) (string, error) {
	out := make([]byte, 0, n)
	buf := make([]byte, 2*n)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("generate bootstrap token: %w", err)
		}
		for _, b := range buf {
			// 252 = 7*36: drop the bytes that would bias the draw.
			if b < 252 && len(out) < n {
				out = append(out, tokenChars[int(b)%len(tokenChars)])
			}
		}
	}
	return string(out), nil
}

// TokenOptions are the optional fields of a token Secret.
type TokenOptions struct {
	Description string
	// TTL from now (0: never expires). kubeadm's default is 24 h.
	TTL time.Duration
	// Usages allowed; nil: signing and authentication (kubeadm's default).
	Usages []string
	// ExtraGroups join system:bootstrappers; each must match GroupPattern.
	ExtraGroups []string
}

// Secret returns the Secret that makes token valid, as kubeadm's
// BootstrapTokenToSecret. It fails on a malformed token, an unknown usage
// or an extra group outside GroupPattern.
func Secret(token string, opts TokenOptions, now time.Time) (*corev1.Secret, error) {
	id, secret, err := ParseToken(token)
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{TokenIDKey: []byte(id), TokenSecretKey: []byte(secret)}
	if opts.Description != "" {
		data[DescriptionKey] = []byte(opts.Description)
	}
	if opts.TTL > 0 {
		data[ExpirationKey] = []byte(now.Add(opts.TTL).UTC().Format(time.RFC3339))
	}
	usages := opts.Usages
	if usages == nil {
		usages = Usages
	}
	for _, u := range usages {
		if !slices.Contains(Usages, u) {
			return nil, fmt.Errorf("unknown bootstrap token usage %q (known: %s)", u, strings.Join(Usages, ", "))
		}
		data[UsagePrefix+u] = []byte("true")
	}
	for _, g := range opts.ExtraGroups {
		if !GroupPattern.MatchString(g) {
			return nil, fmt.Errorf("bootstrap group %q is invalid (must match %s)", g, GroupPattern)
		}
	}
	if len(opts.ExtraGroups) > 0 {
		data[ExtraGroupsKey] = []byte(strings.Join(opts.ExtraGroups, ","))
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: SecretNamespace, Name: SecretPrefix + id},
		Type:       SecretType,
		Data:       data,
	}, nil
}

// Expiration returns a token Secret's expiration, zero when it has none;
// an unparsable one counts as already expired (ok=false).
func Expiration(s *corev1.Secret) (t time.Time, ok bool) {
	v, has := s.Data[ExpirationKey]
	if !has {
		return time.Time{}, true
	}
	t, err := time.Parse(time.RFC3339, string(v))
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// Expired reports whether a token Secret is past its expiration at now.
func Expired(s *corev1.Secret, now time.Time) bool {
	t, ok := Expiration(s)
	return !ok || (!t.IsZero() && !now.Before(t))
}

// Groups returns system:bootstrappers and the Secret's valid extra groups,
// or an error naming an invalid one, as cluster-bootstrap's GetGroups.
func Groups(s *corev1.Secret) ([]string, error) {
	groups := []string{DefaultGroup}
	extra := strings.TrimSpace(string(s.Data[ExtraGroupsKey]))
	if extra == "" {
		return groups, nil
	}
	for _, g := range strings.Split(extra, ",") {
		g = strings.TrimSpace(g)
		if !GroupPattern.MatchString(g) {
			return nil, fmt.Errorf("bootstrap group %q is invalid", g)
		}
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	return groups, nil
}

// SecretGetter reads a Secret of kube-system; a missing one is an error
// for which apierrors.IsNotFound holds.
type SecretGetter func(ctx context.Context, namespace, name string) (*corev1.Secret, error)

// Authenticator authenticates bootstrap tokens: an authenticator.Token.
type Authenticator struct {
	get SecretGetter
	now func() time.Time
}

// NewAuthenticator returns an Authenticator reading token Secrets with get.
func NewAuthenticator(get SecretGetter) *Authenticator {
	return &Authenticator{get: get, now: time.Now}
}

// AuthenticateToken implements authenticator.Token as Kubernetes' bootstrap
// token authenticator: a token that is not of the bootstrap form, or whose
// Secret is missing, being deleted, of another type, with another secret
// (compared in constant time), expired, without usage-bootstrap-
// authentication "true" or with an invalid extra group, answers (nil,
// false, nil) — it does not authenticate and says nothing of why. Only a
// failure to read the Secret is an error.
func (a *Authenticator) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	id, secret, err := ParseToken(token)
	if err != nil {
		return nil, false, nil
	}
	s, err := a.get(ctx, SecretNamespace, SecretPrefix+id)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("bootstrap token %s: %w", id, err)
	}
	if s.DeletionTimestamp != nil || s.Type != SecretType || s.Data == nil {
		return nil, false, nil
	}
	if subtle.ConstantTimeCompare(s.Data[TokenSecretKey], []byte(secret)) != 1 || string(s.Data[TokenIDKey]) != id {
		return nil, false, nil
	}
	if Expired(s, a.now()) || string(s.Data[UsagePrefix+"authentication"]) != "true" {
		return nil, false, nil
	}
	groups, err := Groups(s)
	if err != nil {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: UserPrefix + id, Groups: groups}}, true, nil
}
