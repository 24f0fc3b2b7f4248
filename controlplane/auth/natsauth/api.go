package natsauth

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nkeys"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Group, Version, Kind and Resource of the credential request API.
const (
	Group    = "orca.dev"
	Version  = "v1"
	Kind     = "NATSCredentialRequest"
	Resource = "natscredentialrequests"
)

// GroupResource is natscredentialrequests.orca.dev (RBAC rules name it so).
var GroupResource = schema.GroupResource{Group: Group, Resource: Resource}

// NATSCredentialRequest (orca.dev/v1, create-only, never stored) asks the
// apiserver for a NATS user JWT for the caller's own nkey, as a
// TokenRequest asks for a token: POST /apis/orca.dev/v1/natscredentialrequests
// answers 201 with status filled. The caller keeps the nkey's seed; only
// its public key travels.
type NATSCredentialRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              NATSCredentialRequestSpec   `json:"spec"`
	Status            NATSCredentialRequestStatus `json:"status,omitempty"`
}

// NATSCredentialRequestSpec is what the caller asks for.
type NATSCredentialRequestSpec struct {
	// PublicKey is the caller's nkey user public key ("U...", 56
	// characters). Required.
	PublicKey string `json:"publicKey"`
	// ReadOnly asks for viewer permissions (see Viewer). A node always
	// gets node permissions for itself (see Node); a member of
	// system:masters asking for ReadOnly=false gets the control plane's
	// (every subject); anyone else must ask for ReadOnly (403 otherwise).
	ReadOnly bool `json:"readOnly,omitempty"`
	// ExpirationSeconds is the JWT's requested lifetime: at least 600,
	// at most the issuer's maximum for the role (node: 1 year, others:
	// 7 days). Default: that maximum for nodes, 24 hours for others.
	ExpirationSeconds *int64 `json:"expirationSeconds,omitempty"`
}

// NATSCredentialRequestStatus is the answer.
type NATSCredentialRequestStatus struct {
	// JWT is the user JWT, signed by the orca account; with the seed it
	// makes a .creds file (jwt.FormatUserConfig).
	JWT string `json:"jwt,omitempty"`
	// User is the NATS user's name ("system:node:edge-1", "orca-viewer:jane").
	User string `json:"user,omitempty"`
	// InboxPrefix is the inbox prefix the user must connect with
	// (nats.CustomInboxPrefix): its subscriptions are allowed only there.
	InboxPrefix string `json:"inboxPrefix,omitempty"`
	// Servers are the NATS URLs to connect to.
	Servers []string `json:"servers,omitempty"`
	// CABundle is the PEM of the CA that signs the NATS servers' certificates.
	CABundle []byte `json:"caBundle,omitempty"`
	// ExpirationTimestamp is when the JWT stops being accepted.
	ExpirationTimestamp metav1.Time `json:"expirationTimestamp"`
}

// DeepCopyObject implements runtime.Object.
func (r *NATSCredentialRequest) DeepCopyObject() runtime.Object {
	out := *r
	r.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if r.Spec.ExpirationSeconds != nil {
		v := *r.Spec.ExpirationSeconds
		out.Spec.ExpirationSeconds = &v
	}
	out.Status.Servers = slices.Clone(r.Status.Servers)
	out.Status.CABundle = slices.Clone(r.Status.CABundle)
	return &out
}

// Lifetimes of issued JWTs.
const (
	MinExpiration       = 600 * time.Second
	NodeMaxExpiration   = 365 * 24 * time.Hour
	ViewerMaxExpiration = 7 * 24 * time.Hour
	ViewerExpiration    = 24 * time.Hour
)

// Issuer answers NATSCredentialRequests with the authority's keys. Servers
// and CABundle are copied into every answer.
type Issuer struct {
	Authority *Authority
	Servers   []string
	CABundle  []byte
}

// NodeName returns the node u is, from Kubernetes' node identity
// (user "system:node:<name>" in group "system:nodes", as the Node
// authorizer's NodeIdentifier); ok is false for any other user.
func NodeName(u user.Info) (string, bool) {
	name, ok := strings.CutPrefix(u.GetName(), "system:node:")
	if !ok || name == "" || !slices.Contains(u.GetGroups(), "system:nodes") {
		return "", false
	}
	return name, true
}

// Issue fills req.Status for the authenticated user u (authorization to
// create natscredentialrequests was checked before). Errors are API
// errors: 422 for a malformed spec, 403 for a user who may not have the
// permissions asked for.
func (i *Issuer) Issue(u user.Info, req *NATSCredentialRequest) error {
	gk := schema.GroupKind{Group: Group, Kind: Kind}
	var errs field.ErrorList
	if !nkeys.IsValidPublicUserKey(req.Spec.PublicKey) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "publicKey"), req.Spec.PublicKey, "must be an nkey user public key (56 characters starting with U)"))
	}
	var want time.Duration
	if e := req.Spec.ExpirationSeconds; e != nil {
		want = time.Duration(*e) * time.Second
		if want < MinExpiration {
			errs = append(errs, field.Invalid(field.NewPath("spec", "expirationSeconds"), *e, "may not be less than 600 seconds"))
		}
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(gk, req.Name, errs)
	}
	var nu User
	switch node, isNode := NodeName(u); {
	case isNode:
		nu = Node(node, clamp(want, NodeMaxExpiration, NodeMaxExpiration))
	case req.Spec.ReadOnly:
		nu = Viewer(u.GetName(), clamp(want, ViewerExpiration, ViewerMaxExpiration))
	case slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup):
		nu = ControlPlane()
		nu.Name = "orca-admin:" + u.GetName()
		nu.TTL = clamp(want, ViewerExpiration, ViewerMaxExpiration)
	default:
		return apierrors.NewForbidden(GroupResource, req.Name, fmt.Errorf("user %q may get only read-only NATS credentials: set spec.readOnly", u.GetName()))
	}
	tok, err := i.Authority.Sign(req.Spec.PublicKey, nu)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	req.Status = NATSCredentialRequestStatus{JWT: tok, User: nu.Name, InboxPrefix: nu.InboxPrefix,
		Servers: slices.Clone(i.Servers), CABundle: slices.Clone(i.CABundle),
		ExpirationTimestamp: metav1.NewTime(time.Now().Add(nu.TTL).Truncate(time.Second))}
	req.APIVersion, req.Kind = Group+"/"+Version, Kind
	return nil
}

// clamp returns want bounded by max, or def when want is 0.
func clamp(want, def, max time.Duration) time.Duration {
	if want == 0 {
		return def
	}
	return min(want, max)
}
