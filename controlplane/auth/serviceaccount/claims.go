// Package serviceaccount signs and verifies ServiceAccount tokens as
// Kubernetes' pkg/serviceaccount: JWTs whose subject is
// system:serviceaccount:<namespace>:<name>, signed by the control plane's
// key (ES256 by default, RS256 for an RSA key), with Kubernetes' private
// "kubernetes.io" claim binding a token to its ServiceAccount and, for a
// bound token (TokenRequest), to a Pod, Secret or Node: a token stops
// working once any object it is bound to is gone or replaced (UID), or
// was deleted more than a minute ago. Legacy tokens (issuer
// "kubernetes/serviceaccount", stored in Secrets of type
// kubernetes.io/service-account-token) verify too while their Secret holds
// them.
//
// The Authenticator is an authenticator.Token for the apiserver's chain;
// TokenRequest issues the tokens of the serviceaccounts/token subresource.
package serviceaccount

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apiserviceaccount "k8s.io/apiserver/pkg/authentication/serviceaccount"
)

// LegacyIssuer is the issuer of legacy (Secret-based) tokens, as
// Kubernetes'.
const LegacyIssuer = "kubernetes/serviceaccount"

// MinTokenExpiration is the shortest expirationSeconds a TokenRequest may
// ask for (10 minutes), DefaultTokenExpiration what it gets when it asks
// for none (1 h, as Kubernetes'), and DefaultProjectedExpiration the
// expirationSeconds of the kube-api-access volume's token (3607 s: the
// value Kubernetes uses so these tokens can be told apart).
const (
	MinTokenExpiration         = 10 * time.Minute
	DefaultTokenExpiration     = time.Hour
	DefaultProjectedExpiration = 3607 * time.Second
)

// clockSkew is the leeway for exp, nbf and iat checks (60 s, as
// go-jose's jwt.DefaultLeeway and Kubernetes').
const clockSkew = jwt.DefaultLeeway

// deletedGrace is how long a token of an object being deleted keeps
// working after its deletionTimestamp (Kubernetes: 60 s).
const deletedGrace = 60 * time.Second

// privateClaims are Kubernetes' "kubernetes.io" claim.
type privateClaims struct {
	Kubernetes kubernetesClaims `json:"kubernetes.io,omitempty"`
}

type kubernetesClaims struct {
	Namespace string           `json:"namespace,omitempty"`
	Svcacct   ref              `json:"serviceaccount,omitempty"`
	Pod       *ref             `json:"pod,omitempty"`
	Secret    *ref             `json:"secret,omitempty"`
	Node      *ref             `json:"node,omitempty"`
	WarnAfter *jwt.NumericDate `json:"warnafter,omitempty"`
}

type ref struct {
	Name string `json:"name,omitempty"`
	UID  string `json:"uid,omitempty"`
}

// Binding is what a bound token is tied to besides its ServiceAccount: at
// most one of Pod and Secret, and Node (alone, or the node of Pod).
type Binding struct {
	Pod    *corev1.Pod
	Secret *corev1.Secret
	Node   *corev1.Node
}

// claims builds the public and private claims of a token for sa, valid
// from now for expiration, for audiences, as Kubernetes' Claims. The
// token's ID (jti) is a random UUID.
func claims(sa *corev1.ServiceAccount, b Binding, now time.Time, expiration time.Duration, audiences []string) (*jwt.Claims, *privateClaims) {
	pub := &jwt.Claims{
		Subject:   apiserviceaccount.MakeUsername(sa.Namespace, sa.Name),
		Audience:  jwt.Audience(audiences),
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		Expiry:    jwt.NewNumericDate(now.Add(expiration)),
		ID:        uuid.NewString(),
	}
	priv := &privateClaims{Kubernetes: kubernetesClaims{
		Namespace: sa.Namespace,
		Svcacct:   ref{Name: sa.Name, UID: string(sa.UID)},
	}}
	if b.Pod != nil {
		priv.Kubernetes.Pod = &ref{Name: b.Pod.Name, UID: string(b.Pod.UID)}
	}
	if b.Secret != nil {
		priv.Kubernetes.Secret = &ref{Name: b.Secret.Name, UID: string(b.Secret.UID)}
	}
	if b.Node != nil {
		priv.Kubernetes.Node = &ref{Name: b.Node.Name, UID: string(b.Node.UID)}
	}
	return pub, priv
}

// Getter reads the objects a token is bound to. A missing object is an
// error for which apierrors.IsNotFound holds.
type Getter interface {
	GetServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error)
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
}

// errInvalid marks a token that is well formed but no longer (or never)
// valid; its message says why.
var errInvalid = errors.New("invalid service account token")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errInvalid, fmt.Sprintf(format, args...))
}
