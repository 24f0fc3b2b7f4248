package security

import (
	"context"
	"crypto"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"

	"github.com/orca-edge/orca/controlplane/auth/bootstrap"
	"github.com/orca-edge/orca/controlplane/auth/serviceaccount"
	"github.com/orca-edge/orca/controlplane/store"
)

// ServiceAccountKeyName is the ServiceAccount signing key created on
// first start under the TLS directory (service-account.key, ECDSA P-256,
// 0600) when --service-account-signing-key-file is not set.
const ServiceAccountKeyName = "service-account.key"

// DefaultServiceAccountIssuer is the issuer ("iss") of ServiceAccount
// tokens when --service-account-issuer is not set: the in-cluster name of
// the apiserver, as kubeadm's default.
const DefaultServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// ServiceAccountOptions are the ServiceAccount token flags of orca-server,
// with kube-apiserver's names.
type ServiceAccountOptions struct {
	// SigningKeyFile (--service-account-signing-key-file) is the PEM
	// private key tokens are signed with. Empty: <data-dir>/tls/
	// service-account.key, created on first start.
	SigningKeyFile string
	// KeyFiles (--service-account-key-file) are PEM files of public (or
	// private) keys tokens are verified with, in addition to the signing
	// key's (for key rotation: keep the old key's file here).
	KeyFiles []string
	// Issuers (--service-account-issuer): the first is written into new
	// tokens, all are accepted. Empty: DefaultServiceAccountIssuer.
	Issuers []string
	// APIAudiences (--api-audiences) are the audiences the apiserver
	// accepts tokens for and gives a TokenRequest that names none.
	// Empty: the first issuer.
	APIAudiences []string
	// MaxTokenExpiration (--service-account-max-token-expiration) caps
	// TokenRequests' expirationSeconds; 0: no cap.
	MaxTokenExpiration time.Duration
	// DisableLegacyTokens refuses Secret-based tokens
	// (kubernetes.io/service-account-token Secrets); Kubernetes accepts
	// them by default, so does orca.
	DisableLegacyTokens bool
}

// serviceAccountMaterial is what loadServiceAccountKeys read.
type serviceAccountMaterial struct {
	signer    *serviceaccount.Signer
	keys      []crypto.PublicKey
	issuers   []string
	audiences []string
	maxExp    time.Duration
	legacy    bool
}

// loadServiceAccountKeys reads or creates the signing key and reads the
// verification keys. Errors name the file.
func loadServiceAccountKeys(dir string, o ServiceAccountOptions) (*serviceAccountMaterial, error) {
	path := o.SigningKeyFile
	var key crypto.Signer
	var err error
	if path == "" {
		key, err = serviceaccount.LoadOrCreateSigningKey(filepath.Join(dir, ServiceAccountKeyName))
	} else {
		key, err = serviceaccount.LoadOrCreateSigningKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("--service-account-signing-key-file: %w", err)
	}
	issuers := o.Issuers
	if len(issuers) == 0 {
		issuers = []string{DefaultServiceAccountIssuer}
	}
	signer, err := serviceaccount.NewSigner(issuers[0], key)
	if err != nil {
		return nil, err
	}
	sm := &serviceAccountMaterial{signer: signer, keys: []crypto.PublicKey{key.Public()}, issuers: issuers,
		audiences: o.APIAudiences, maxExp: o.MaxTokenExpiration, legacy: !o.DisableLegacyTokens}
	if len(sm.audiences) == 0 {
		sm.audiences = []string{issuers[0]}
	}
	for _, f := range o.KeyFiles {
		keys, err := serviceaccount.LoadPublicKeys(f)
		if err != nil {
			return nil, fmt.Errorf("--service-account-key-file: %w", err)
		}
		sm.keys = append(sm.keys, keys...)
	}
	return sm, nil
}

// tokenAuthenticators are the bearer token authenticators over st that
// join the chain after the x509 and token file ones: bootstrap tokens,
// then ServiceAccount tokens.
func (m *Material) tokenAuthenticators(st *store.Store) ([]authenticator.Request, error) {
	getter := serviceaccount.StoreGetter(st)
	boot := bootstrap.NewAuthenticator(func(ctx context.Context, ns, name string) (*corev1.Secret, error) {
		return getter.GetSecret(ctx, ns, name)
	})
	sa, err := serviceaccount.NewAuthenticator(serviceaccount.AuthenticatorConfig{Issuers: m.serviceAccounts.issuers, Keys: m.serviceAccounts.keys,
		APIAudiences: m.serviceAccounts.audiences, Getter: getter, Legacy: m.serviceAccounts.legacy})
	if err != nil {
		return nil, err
	}
	return []authenticator.Request{bearertoken.New(boot), bearertoken.New(sa)}, nil
}

// ServiceAccountTokens is the apiserver's TokenRequest issuer over st
// (apiserver.Config.ServiceAccountTokens).
func (m *Material) ServiceAccountTokens(st *store.Store) *serviceaccount.Issuer {
	return &serviceaccount.Issuer{Signer: m.serviceAccounts.signer, Getter: serviceaccount.StoreGetter(st),
		APIAudiences: m.serviceAccounts.audiences, MaxExpiration: m.serviceAccounts.maxExp}
}
