package serviceaccount

import (
	"context"
	"crypto/subtle"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	apiserviceaccount "k8s.io/apiserver/pkg/authentication/serviceaccount"
)

// legacyClaims are the private claims of a legacy token, as Kubernetes'.
type legacyClaims struct {
	ServiceAccountName string `json:"kubernetes.io/serviceaccount/service-account.name"`
	ServiceAccountUID  string `json:"kubernetes.io/serviceaccount/service-account.uid"`
	SecretName         string `json:"kubernetes.io/serviceaccount/secret.name"`
	Namespace          string `json:"kubernetes.io/serviceaccount/namespace"`
}

// LegacyTokenSecretKeys are the keys of a kubernetes.io/service-account-token
// Secret: the token, the cluster CA and the namespace.
const (
	LegacyTokenKey     = corev1.ServiceAccountTokenKey
	LegacyRootCAKey    = corev1.ServiceAccountRootCAKey
	LegacyNamespaceKey = corev1.ServiceAccountNamespaceKey
)

// LegacyToken signs the token a kubernetes.io/service-account-token Secret
// of sa holds (the tokens controller's job): no expiry, no audience, valid
// while the Secret holds it and sa keeps its UID.
func (s *Signer) LegacyToken(sa *corev1.ServiceAccount, secret *corev1.Secret) (string, error) {
	return s.legacyToken(sa, secret)
}

// validateLegacy checks a verified legacy token as Kubernetes'
// legacyValidator: the Secret it names exists, is not being deleted and
// holds exactly this token, and the ServiceAccount exists with the
// claimed UID. Legacy tokens are audience-agnostic: they get the
// request's audiences.
func (a *Authenticator) validateLegacy(ctx context.Context, token string, pub *jwt.Claims, priv *legacyClaims) (*authenticator.Response, bool, error) {
	if priv.Namespace == "" || priv.ServiceAccountName == "" || priv.SecretName == "" {
		return nil, false, invalid("legacy token has no namespace, service account or secret reference")
	}
	if pub.Subject != apiserviceaccount.MakeUsername(priv.Namespace, priv.ServiceAccountName) {
		return nil, false, invalid("token subject does not match its service account")
	}
	secret, err := a.getter.GetSecret(ctx, priv.Namespace, priv.SecretName)
	if err != nil {
		return nil, false, boundCheck("secret", priv.Namespace+"/"+priv.SecretName, "", secret, err, time.Time{})
	}
	if secret.DeletionTimestamp != nil {
		return nil, false, invalid("secret %s/%s is being deleted: token has been invalidated", priv.Namespace, priv.SecretName)
	}
	if subtle.ConstantTimeCompare(secret.Data[LegacyTokenKey], []byte(token)) != 1 {
		return nil, false, invalid("token does not match the one of secret %s/%s", priv.Namespace, priv.SecretName)
	}
	sa, err := a.getter.GetServiceAccount(ctx, priv.Namespace, priv.ServiceAccountName)
	if err := boundCheck("service account", priv.Namespace+"/"+priv.ServiceAccountName, priv.ServiceAccountUID, sa, err, a.now().Add(-deletedGrace)); err != nil {
		return nil, false, err
	}
	auds, _ := authenticator.AudiencesFrom(ctx)
	return &authenticator.Response{Audiences: auds, User: serviceAccountUser(priv.Namespace, priv.ServiceAccountName, priv.ServiceAccountUID, nil)}, true, nil
}
