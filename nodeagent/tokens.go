package nodeagent

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// defaultProjectedTokenExpiration is a serviceAccountToken projection's
// expirationSeconds when it sets none (the API's default: 1 h).
const defaultProjectedTokenExpiration = int64(3600)

// tokenMaxTTL is the longest a projected token is kept before it is
// requested again, whatever its expiry (the kubelet's maxTTL: 24 h).
const tokenMaxTTL = 24 * time.Hour

// tokenCreator requests a ServiceAccount token (the agent's API's
// CreateToken: POST serviceaccounts/<name>/token).
type tokenCreator func(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)

// tokenManager caches the ServiceAccount tokens of projected volumes, as
// the kubelet's token manager (pkg/kubelet/token): a token is requested
// again once 80% of its life (or 24 h) has passed, and while the request
// fails the cached token is used until it expires. Safe for concurrent
// use.
type tokenManager struct {
	create tokenCreator
	now    func() time.Time

	mu    sync.Mutex // guards cache
	cache map[string]*authenticationv1.TokenRequest
}

func newTokenManager(create tokenCreator) *tokenManager {
	return &tokenManager{create: create, now: time.Now, cache: map[string]*authenticationv1.TokenRequest{}}
}

// tokenKey is the cache key of a request: ServiceAccount, audiences,
// expiration and the bound pod's UID.
func tokenKey(namespace, sa string, tr *authenticationv1.TokenRequest) string {
	uid := ""
	if r := tr.Spec.BoundObjectRef; r != nil {
		uid = string(r.UID)
	}
	exp := int64(0)
	if tr.Spec.ExpirationSeconds != nil {
		exp = *tr.Spec.ExpirationSeconds
	}
	return fmt.Sprintf("%s/%s/%s/%d/%s", namespace, sa, strings.Join(tr.Spec.Audiences, ","), exp, uid)
}

// token returns a valid token for the request, from the cache when it
// does not need a refresh.
func (m *tokenManager) token(ctx context.Context, namespace, sa string, tr *authenticationv1.TokenRequest) (string, error) {
	if m == nil || m.create == nil {
		return "", fmt.Errorf("service account token of %s/%s: this agent has no API to request tokens", namespace, sa)
	}
	key := tokenKey(namespace, sa, tr)
	m.mu.Lock()
	cached := m.cache[key]
	m.mu.Unlock()
	if cached != nil && !m.requiresRefresh(cached) {
		return cached.Status.Token, nil
	}
	out, err := m.create(ctx, namespace, sa, tr.DeepCopy())
	if err != nil {
		if cached != nil && m.now().Before(cached.Status.ExpirationTimestamp.Time) {
			return cached.Status.Token, nil
		}
		return "", fmt.Errorf("request service account token of %s/%s: %w", namespace, sa, err)
	}
	if out.Status.Token == "" || out.Status.ExpirationTimestamp.IsZero() {
		return "", fmt.Errorf("request service account token of %s/%s: the answer has no token", namespace, sa)
	}
	// The time it was issued is kept in the cached copy's
	// creationTimestamp (the kubelet reads it from the token).
	out.CreationTimestamp.Time = m.now()
	m.mu.Lock()
	m.cache[key] = out
	m.mu.Unlock()
	return out.Status.Token, nil
}

// requiresRefresh is the kubelet's: expired, past 80% of its life, or
// older than tokenMaxTTL.
func (m *tokenManager) requiresRefresh(tr *authenticationv1.TokenRequest) bool {
	now := m.now()
	exp := tr.Status.ExpirationTimestamp.Time
	iat := tr.CreationTimestamp.Time
	if !now.Before(exp) {
		return true
	}
	ttl := exp.Sub(iat)
	return now.After(iat.Add(ttl*8/10)) || now.After(iat.Add(tokenMaxTTL))
}

// forgetPod drops the cached tokens bound to pod uid (the pod ended).
func (m *tokenManager) forgetPod(uid types.UID) {
	if m == nil || uid == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, tr := range m.cache {
		if r := tr.Spec.BoundObjectRef; r != nil && r.UID == uid {
			delete(m.cache, k)
		}
	}
}

// projectedTokenRequest is the TokenRequest of a serviceAccountToken
// projection of pod: its audience (none: the apiserver's), its
// expirationSeconds (default 1 h), bound to the pod.
func projectedTokenRequest(pod *corev1.Pod, src *corev1.ServiceAccountTokenProjection) *authenticationv1.TokenRequest {
	exp := defaultProjectedTokenExpiration
	if src.ExpirationSeconds != nil {
		exp = *src.ExpirationSeconds
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
	}}
	if src.Audience != "" {
		tr.Spec.Audiences = []string{src.Audience}
	}
	return tr
}
