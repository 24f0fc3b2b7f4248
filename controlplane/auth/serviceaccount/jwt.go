package serviceaccount

import (
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	apiserviceaccount "k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// MaxTokenBytes bounds the size of a token the Authenticator parses
// (16 KiB; tokens orca issues are under 2 KiB). A longer bearer token is
// not a ServiceAccount token.
const MaxTokenBytes = 16 << 10

// signatureAlgorithms are the JWS algorithms a token may be signed with.
var signatureAlgorithms = []jose.SignatureAlgorithm{jose.ES256, jose.ES384, jose.ES512, jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512}

// Signer signs ServiceAccount tokens with one key for one issuer.
type Signer struct {
	public crypto.PublicKey
	issuer string
	signer jose.Signer
	now    func() time.Time
}

// NewSigner returns a Signer of tokens with issuer iss ("iss" claim;
// kube-apiserver's first --service-account-issuer) signed by key (ECDSA:
// ES256/384/512 by curve; RSA: RS256), with a "kid" header (KeyID).
func NewSigner(iss string, key crypto.Signer) (*Signer, error) {
	if iss == "" {
		return nil, errors.New("service account token signer: an issuer is required")
	}
	alg, err := signingAlgorithm(key.Public())
	if err != nil {
		return nil, fmt.Errorf("service account token signer: %w", err)
	}
	kid, err := KeyID(key.Public())
	if err != nil {
		return nil, err
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.SignatureAlgorithm(alg), Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, fmt.Errorf("service account token signer: %w", err)
	}
	return &Signer{public: key.Public(), issuer: iss, signer: s, now: time.Now}, nil
}

// PublicKey returns the public half of the signing key.
func (s *Signer) PublicKey() crypto.PublicKey { return s.public }

// Issuer returns the signer's issuer.
func (s *Signer) Issuer() string { return s.issuer }

// Token signs a token for sa bound to b, valid for expiration from now for
// audiences, and returns it with its expiry (second precision).
func (s *Signer) Token(sa *corev1.ServiceAccount, b Binding, expiration time.Duration, audiences []string) (string, time.Time, error) {
	now := s.now()
	pub, priv := claims(sa, b, now, expiration, audiences)
	pub.Issuer = s.issuer
	tok, err := jwt.Signed(s.signer).Claims(pub).Claims(priv).Serialize()
	if err != nil {
		return "", time.Time{}, fmt.Errorf("sign token of service account %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	return tok, pub.Expiry.Time(), nil
}

// legacyToken signs a legacy token (no expiry, no audience) for sa stored
// in secret, as Kubernetes' LegacyClaims.
func (s *Signer) legacyToken(sa *corev1.ServiceAccount, secret *corev1.Secret) (string, error) {
	pub := &jwt.Claims{Issuer: LegacyIssuer, Subject: apiserviceaccount.MakeUsername(sa.Namespace, sa.Name)}
	priv := &legacyClaims{Namespace: sa.Namespace, ServiceAccountName: sa.Name, ServiceAccountUID: string(sa.UID), SecretName: secret.Name}
	return jwt.Signed(s.signer).Claims(pub).Claims(priv).Serialize()
}

// Authenticator verifies ServiceAccount tokens: an authenticator.Token for
// the apiserver's union of token authenticators (kube-apiserver's
// serviceaccount JWT authenticator).
type Authenticator struct {
	issuers   map[string]bool
	keys      []crypto.PublicKey
	audiences authenticator.Audiences
	getter    Getter
	legacy    bool
	now       func() time.Time
}

// AuthenticatorConfig configures NewAuthenticator.
type AuthenticatorConfig struct {
	// Issuers are the accepted "iss" values (kube-apiserver's
	// --service-account-issuer, every value). Required.
	Issuers []string
	// Keys verify signatures (--service-account-key-file). Required.
	Keys []crypto.PublicKey
	// APIAudiences are the audiences a token must have one of when the
	// request carries none of its own (authenticator.WithAudiences);
	// kube-apiserver's --api-audiences, which defaults to the first
	// issuer. Nil: Issuers[0].
	APIAudiences []string
	// Getter reads the objects tokens are bound to. Required.
	Getter Getter
	// Legacy accepts legacy Secret-based tokens (issuer
	// "kubernetes/serviceaccount") while their Secret exists and holds
	// the token. Kubernetes' default is true.
	Legacy bool
}

// NewAuthenticator returns an Authenticator; it fails without issuers,
// keys or getter.
func NewAuthenticator(cfg AuthenticatorConfig) (*Authenticator, error) {
	if len(cfg.Issuers) == 0 || len(cfg.Keys) == 0 || cfg.Getter == nil {
		return nil, errors.New("service account authenticator: issuers, keys and getter are required")
	}
	a := &Authenticator{issuers: map[string]bool{}, keys: cfg.Keys, audiences: cfg.APIAudiences, getter: cfg.Getter, legacy: cfg.Legacy, now: time.Now}
	for _, iss := range cfg.Issuers {
		a.issuers[iss] = true
	}
	if len(a.audiences) == 0 {
		a.audiences = authenticator.Audiences{cfg.Issuers[0]}
	}
	return a, nil
}

// APIAudiences returns the audiences the authenticator accepts by default.
func (a *Authenticator) APIAudiences() authenticator.Audiences { return a.audiences }

// AuthenticateToken implements authenticator.Token. A token that is not a
// JWT of one of the issuers answers (nil, false, nil), so that the next
// authenticator of a union may try it; one of an issuer that fails to
// verify (signature, expiry, audience, a bound object gone) answers an
// error saying why.
func (a *Authenticator) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	iss, ok := peekIssuer(token)
	if !ok {
		return nil, false, nil
	}
	legacy := iss == LegacyIssuer
	if !a.issuers[iss] && !(legacy && a.legacy) {
		return nil, false, nil
	}
	tok, err := jwt.ParseSigned(token, signatureAlgorithms)
	if err != nil {
		return nil, false, nil
	}
	var pub jwt.Claims
	var raw json.RawMessage
	verified := false
	for _, k := range a.keys {
		if err := tok.Claims(k, &pub, &raw); err == nil {
			verified = true
			break
		}
	}
	if !verified {
		return nil, false, invalid("signature does not verify")
	}
	if legacy {
		var priv legacyClaims
		if err := json.Unmarshal(raw, &priv); err != nil {
			return nil, false, invalid("claims do not decode")
		}
		return a.validateLegacy(ctx, token, &pub, &priv)
	}
	var priv privateClaims
	if err := json.Unmarshal(raw, &priv); err != nil {
		return nil, false, invalid("claims do not decode")
	}
	return a.validate(ctx, &pub, &priv)
}

// peekIssuer returns the "iss" claim of a compact JWS without verifying
// it, and false when token is not one (three base64url parts, a JSON
// payload), as Kubernetes' hasCorrectIssuer.
func peekIssuer(token string) (string, bool) {
	if len(token) > MaxTokenBytes {
		return "", false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", false
	}
	var c struct {
		Issuer string `json:"iss"`
	}
	if err := json.Unmarshal(payload, &c); err != nil || c.Issuer == "" {
		return "", false
	}
	return c.Issuer, true
}

// validate checks a verified bound token as Kubernetes' validator.Validate:
// times (with clockSkew), audiences, then each bound object: it must
// exist with the claimed UID and not have been deleted more than
// deletedGrace ago.
func (a *Authenticator) validate(ctx context.Context, pub *jwt.Claims, priv *privateClaims) (*authenticator.Response, bool, error) {
	now := a.now()
	if err := pub.ValidateWithLeeway(jwt.Expected{Time: now}, clockSkew); err != nil {
		switch {
		case errors.Is(err, jwt.ErrExpired):
			return nil, false, invalid("service account token has expired")
		case errors.Is(err, jwt.ErrNotValidYet):
			return nil, false, invalid("service account token is not valid yet")
		case errors.Is(err, jwt.ErrIssuedInTheFuture):
			return nil, false, invalid("service account token is issued in the future")
		}
		return nil, false, invalid("%v", err)
	}
	if pub.Expiry == nil {
		return nil, false, invalid("service account token has no expiry")
	}
	want, ok := authenticator.AudiencesFrom(ctx)
	if !ok || len(want) == 0 {
		want = a.audiences
	}
	auds := want.Intersect(authenticator.Audiences(pub.Audience))
	if len(auds) == 0 {
		return nil, false, invalid("token audiences %q is invalid for the target audiences %q", []string(pub.Audience), []string(want))
	}
	k := priv.Kubernetes
	if k.Namespace == "" || k.Svcacct.Name == "" || k.Svcacct.UID == "" {
		return nil, false, invalid("token has no namespace or service account reference")
	}
	if pub.Subject != apiserviceaccount.MakeUsername(k.Namespace, k.Svcacct.Name) {
		return nil, false, invalid("token subject does not match its service account")
	}
	deletedBefore := now.Add(-deletedGrace)
	sa, err := a.getter.GetServiceAccount(ctx, k.Namespace, k.Svcacct.Name)
	if err := boundCheck("service account", k.Namespace+"/"+k.Svcacct.Name, k.Svcacct.UID, sa, err, deletedBefore); err != nil {
		return nil, false, err
	}
	extra := map[string][]string{}
	if k.Secret != nil {
		s, err := a.getter.GetSecret(ctx, k.Namespace, k.Secret.Name)
		if err := boundCheck("secret", k.Namespace+"/"+k.Secret.Name, k.Secret.UID, s, err, deletedBefore); err != nil {
			return nil, false, err
		}
	}
	if k.Pod != nil {
		p, err := a.getter.GetPod(ctx, k.Namespace, k.Pod.Name)
		if err := boundCheck("pod", k.Namespace+"/"+k.Pod.Name, k.Pod.UID, p, err, deletedBefore); err != nil {
			return nil, false, err
		}
		extra[apiserviceaccount.PodNameKey] = []string{k.Pod.Name}
		extra[apiserviceaccount.PodUIDKey] = []string{k.Pod.UID}
	}
	if k.Node != nil {
		// As Kubernetes: a node is checked when the token is bound to it
		// alone; a pod-bound token records its node for the authorizer.
		if k.Pod == nil {
			n, err := a.getter.GetNode(ctx, k.Node.Name)
			if err := boundCheck("node", k.Node.Name, k.Node.UID, n, err, deletedBefore); err != nil {
				return nil, false, err
			}
		}
		extra[apiserviceaccount.NodeNameKey] = []string{k.Node.Name}
		if k.Node.UID != "" {
			extra[apiserviceaccount.NodeUIDKey] = []string{k.Node.UID}
		}
	}
	if pub.ID != "" {
		extra[CredentialIDKey] = []string{"JTI=" + pub.ID}
	}
	return &authenticator.Response{Audiences: auds, User: serviceAccountUser(k.Namespace, k.Svcacct.Name, k.Svcacct.UID, extra)}, true, nil
}

// CredentialIDKey is the user "extra" key holding a token's ID
// ("JTI=<uuid>"), as Kubernetes' authentication.kubernetes.io/credential-id.
const CredentialIDKey = "authentication.kubernetes.io/credential-id"

// serviceAccountUser is the user of a ServiceAccount: system:serviceaccount:
// <ns>:<name>, groups system:serviceaccounts and system:serviceaccounts:<ns>
// (system:authenticated is added by the chain).
func serviceAccountUser(namespace, name, uid string, extra map[string][]string) user.Info {
	if len(extra) == 0 {
		extra = nil
	}
	return &user.DefaultInfo{
		Name:   apiserviceaccount.MakeUsername(namespace, name),
		UID:    uid,
		Groups: apiserviceaccount.MakeGroupNames(namespace),
		Extra:  extra,
	}
}

// boundCheck checks one bound object read as (obj, err): NotFound is "has
// been deleted", another error is passed on (the request fails, not the
// token), a UID mismatch or a deletion older than deletedBefore
// invalidates the token.
func boundCheck(what, name, uid string, obj metav1.Object, err error, deletedBefore time.Time) error {
	if err != nil {
		if apierrors.IsNotFound(err) {
			return invalid("%s %s has been deleted", what, name)
		}
		return fmt.Errorf("service account token: read %s %s: %w", what, name, err)
	}
	if string(obj.GetUID()) != uid {
		return invalid("%s UID (%s) does not match claim (%s)", what, obj.GetUID(), uid)
	}
	if ts := obj.GetDeletionTimestamp(); ts != nil && ts.Time.Before(deletedBefore) {
		return invalid("%s %s is being deleted: token has been invalidated", what, name)
	}
	return nil
}
