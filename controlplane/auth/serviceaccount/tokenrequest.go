package serviceaccount

import (
	"context"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxExpiration is the longest expirationSeconds the API accepts (2^32 s),
// as Kubernetes' ValidateTokenRequest.
const maxExpiration = int64(1) << 32

// Issuer answers TokenRequests (the serviceaccounts/token subresource), as
// Kubernetes' pkg/registry/core/serviceaccount/storage TokenREST.
type Issuer struct {
	// Signer signs the tokens. Required.
	Signer *Signer
	// Getter reads the ServiceAccount and the bound objects. Required.
	Getter Getter
	// APIAudiences are the audiences of a request that names none
	// (kube-apiserver's --api-audiences). Nil: the signer's issuer.
	APIAudiences []string
	// MaxExpiration caps expirationSeconds
	// (--service-account-max-token-expiration); 0: no cap below 2^32 s.
	// Kubernetes does not extend kube-api-access tokens to a year here:
	// orca's projected tokens are renewed at 80% of their life instead.
	MaxExpiration time.Duration
}

// ValidateTokenRequest checks a TokenRequest's spec as Kubernetes'
// ValidateTokenRequest: expirationSeconds between 600 and 2^32.
func ValidateTokenRequest(tr *authenticationv1.TokenRequest) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec", "expirationSeconds")
	if tr.Spec.ExpirationSeconds != nil {
		switch s := *tr.Spec.ExpirationSeconds; {
		case s < int64(MinTokenExpiration/time.Second):
			errs = append(errs, field.Invalid(p, s, "may not specify a duration less than 10 minutes"))
		case s > maxExpiration:
			errs = append(errs, field.TooLong(p, s, int(maxExpiration)))
		}
	}
	return errs
}

// Create issues the token of ServiceAccount namespace/name for tr and
// returns tr with status.token and status.expirationTimestamp set
// (dryRun: status empty). Errors are Kubernetes' API errors: 422 for a
// bad expirationSeconds, 404 for a missing ServiceAccount or bound object,
// 400 for a bound object of another kind or a pod of another
// ServiceAccount, 409 for a bound object whose UID moved.
func (is *Issuer) Create(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest, dryRun bool) (*authenticationv1.TokenRequest, error) {
	if tr.Spec.ExpirationSeconds == nil {
		s := int64(DefaultTokenExpiration / time.Second)
		tr.Spec.ExpirationSeconds = &s
	}
	if errs := ValidateTokenRequest(tr); len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: authenticationv1.GroupName, Kind: "TokenRequest"}, name, errs)
	}
	sa, err := is.Getter.GetServiceAccount(ctx, namespace, name)
	if err != nil {
		return nil, notFoundAs(err, schema.GroupResource{Resource: "serviceaccounts"}, name)
	}
	var b Binding
	if ref := tr.Spec.BoundObjectRef; ref != nil {
		if err := is.bind(ctx, namespace, name, ref, &b); err != nil {
			return nil, err
		}
	}
	auds := tr.Spec.Audiences
	if len(auds) == 0 {
		auds = is.APIAudiences
		if len(auds) == 0 {
			auds = []string{is.Signer.Issuer()}
		}
	}
	exp := time.Duration(*tr.Spec.ExpirationSeconds) * time.Second
	if is.MaxExpiration > 0 && exp > is.MaxExpiration {
		exp = is.MaxExpiration
	}
	out := tr.DeepCopy()
	out.Namespace, out.Name = namespace, name
	out.Spec.Audiences = auds
	if dryRun {
		return out, nil
	}
	tok, expiry, err := is.Signer.Token(sa, b, exp, auds)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out.Status = authenticationv1.TokenRequestStatus{Token: tok, ExpirationTimestamp: metav1.NewTime(expiry)}
	return out, nil
}

// bind resolves the bound object reference of a TokenRequest for
// ServiceAccount namespace/saName into b.
func (is *Issuer) bind(ctx context.Context, namespace, saName string, ref *authenticationv1.BoundObjectReference, b *Binding) error {
	gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
	var uid string
	gr := schema.GroupResource{Resource: ref.Kind}
	switch {
	case gvk.Group == "" && gvk.Version == "v1" && gvk.Kind == "Pod":
		pod, err := is.Getter.GetPod(ctx, namespace, ref.Name)
		if err != nil {
			return notFoundAs(err, schema.GroupResource{Resource: "pods"}, ref.Name)
		}
		if pod.Spec.ServiceAccountName != saName {
			return apierrors.NewBadRequest(fmt.Sprintf("cannot bind token for serviceaccount %q to pod running with different serviceaccount name.", saName))
		}
		uid, b.Pod = string(pod.UID), pod
		if pod.Spec.NodeName != "" {
			// The pod's node goes into the token (name, and UID when
			// readable), as Kubernetes' ServiceAccountTokenPodNodeInfo.
			node, err := is.Getter.GetNode(ctx, pod.Spec.NodeName)
			if err != nil {
				node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: pod.Spec.NodeName}}
			}
			b.Node = node
		}
	case gvk.Group == "" && gvk.Version == "v1" && gvk.Kind == "Secret":
		s, err := is.Getter.GetSecret(ctx, namespace, ref.Name)
		if err != nil {
			return notFoundAs(err, schema.GroupResource{Resource: "secrets"}, ref.Name)
		}
		uid, b.Secret = string(s.UID), s
	case gvk.Group == "" && gvk.Version == "v1" && gvk.Kind == "Node":
		n, err := is.Getter.GetNode(ctx, ref.Name)
		if err != nil {
			return notFoundAs(err, schema.GroupResource{Resource: "nodes"}, ref.Name)
		}
		uid, b.Node = string(n.UID), n
	default:
		return apierrors.NewBadRequest(fmt.Sprintf("cannot bind token to object of type %s", gvk.String()))
	}
	if ref.UID != "" && string(ref.UID) != uid {
		return apierrors.NewConflict(gr, ref.Name, fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", ref.UID))
	}
	return nil
}

// notFoundAs turns a NotFound of the getter into Kubernetes' 404 for gr
// and passes other errors on.
func notFoundAs(err error, gr schema.GroupResource, name string) error {
	if apierrors.IsNotFound(err) {
		return apierrors.NewNotFound(gr, name)
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return err
	}
	return apierrors.NewInternalError(err)
}
