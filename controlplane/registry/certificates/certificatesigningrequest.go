// Package certificates holds the kinds of the certificates.k8s.io/v1 API
// group: CertificateSigningRequest, as Kubernetes'
// pkg/registry/certificates/certificates and its validation
// (pkg/apis/certificates/validation).
package certificates

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Kinds returns the certificates kinds in discovery order.
func Kinds() []registry.Kind { return []registry.Kind{CertificateSigningRequest()} }

// CertificateSigningRequests is the storage layout of certificates.k8s.io/v1
// CertificateSigningRequests: bucket "certificatesigningrequests",
// cluster-scoped, keys "<name>", short name csr.
var CertificateSigningRequests = store.Resource{Group: certificatesv1.GroupName, Version: "v1", Kind: "CertificateSigningRequest", ListKind: "CertificateSigningRequestList",
	Plural: "certificatesigningrequests", Singular: "certificatesigningrequest", ShortNames: []string{"csr"},
	New:     func() store.Object { return &certificatesv1.CertificateSigningRequest{} },
	NewList: func() runtime.Object { return &certificatesv1.CertificateSigningRequestList{} }}

// MinExpirationSeconds is the shortest spec.expirationSeconds (10 min).
const MinExpirationSeconds = 600

// CertificateSigningRequest is the certificatesigningrequests kind:
//   - spec is immutable; spec.username, uid, groups and extra are the
//     requester's, set by the apiserver on create (SetRequester), never
//     by the client;
//   - spec.request is a PEM CERTIFICATE REQUEST whose signature verifies,
//     spec.signerName a qualified "<domain>/<path>" name, spec.usages
//     known and distinct, spec.expirationSeconds at least 600;
//   - the status subresource is the signer's (status.certificate: PEM
//     CERTIFICATE blocks only, set once); the approval subresource
//     changes only status.conditions (kubectl certificate approve|deny);
//     a condition type appears at most once, Approved and Denied never
//     together, both only with status True, and neither may be removed
//     once set. (Kubernetes also keeps /status from adding Approved or
//     Denied; orca leaves that to authorization: both subresources need
//     their own RBAC rule.)
func CertificateSigningRequest() registry.Kind {
	return registry.Kind{
		Resource:       CertificateSigningRequests,
		NameValidation: func(name string, _ bool) []string { return content.IsPathSegmentName(name) },
		Status:         true,
		Subresources: []registry.Subresource{
			{Name: "approval", Verbs: metav1.Verbs{"get", "patch", "update"}, Update: approvalUpdate},
		},
		PrepareForCreate: func(obj store.Object) {
			obj.(*certificatesv1.CertificateSigningRequest).Status = certificatesv1.CertificateSigningRequestStatus{}
		},
		PrepareForUpdate: func(obj, old store.Object) {
			obj.(*certificatesv1.CertificateSigningRequest).Spec = *old.(*certificatesv1.CertificateSigningRequest).Spec.DeepCopy()
		},
		Validate: func(obj store.Object) field.ErrorList {
			csr := obj.(*certificatesv1.CertificateSigningRequest)
			errs := ValidateSpec(&csr.Spec, field.NewPath("spec"))
			return append(errs, validateStatus(&csr.Status, field.NewPath("status"))...)
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			return validateStatusUpdate(&obj.(*certificatesv1.CertificateSigningRequest).Status, &old.(*certificatesv1.CertificateSigningRequest).Status, field.NewPath("status"))
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn, registry.AgeColumn,
			registry.Column("SignerName", "string", "The name of the signer.", 0),
			registry.Column("Requestor", "string", "Name of the user which submitted the request.", 0),
			registry.Column("RequestedDuration", "string", "The requested duration of the certificate.", 0),
			registry.Column("Condition", "string", "The state of the request.", 0)},
		Row: csrRow,
	}
}

// SetRequester records the user creating csr in its spec (the apiserver
// calls it on create, as Kubernetes' strategy PrepareForCreate).
func SetRequester(csr *certificatesv1.CertificateSigningRequest, username, uid string, groups []string, extra map[string][]string) {
	csr.Spec.Username, csr.Spec.UID, csr.Spec.Groups = username, uid, slices.Clone(groups)
	csr.Spec.Extra = nil
	if len(extra) > 0 {
		csr.Spec.Extra = map[string]certificatesv1.ExtraValue{}
		for k, v := range extra {
			csr.Spec.Extra[k] = slices.Clone(v)
		}
	}
}

// ParseRequest decodes the PEM CERTIFICATE REQUEST of a CSR and checks
// its signature.
func ParseRequest(pemData []byte) (*x509.CertificateRequest, error) {
	block, rest := pem.Decode(pemData)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("PEM block type must be CERTIFICATE REQUEST")
	}
	if len(strings.TrimSpace(string(rest))) > 0 {
		return nil, fmt.Errorf("only one PEM block is allowed")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, err
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("the request's signature does not verify: %w", err)
	}
	return req, nil
}

// knownUsages are the values of spec.usages.
var knownUsages = sets.New(
	"signing", "digital signature", "content commitment", "key encipherment", "key agreement", "data encipherment",
	"cert sign", "crl sign", "encipher only", "decipher only", "any", "server auth", "client auth", "code signing",
	"email protection", "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing",
	"microsoft sgc", "netscape sgc")

// ValidateSpec checks a CSR's spec as Kubernetes' validateCertificateRequest.
func ValidateSpec(spec *certificatesv1.CertificateSigningRequestSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(spec.Request) == 0 {
		errs = append(errs, field.Required(p.Child("request"), ""))
	} else if _, err := ParseRequest(spec.Request); err != nil {
		errs = append(errs, field.Invalid(p.Child("request"), "<certificate request>", err.Error()))
	}
	errs = append(errs, validateSignerName(spec.SignerName, p.Child("signerName"))...)
	if spec.ExpirationSeconds != nil && *spec.ExpirationSeconds < MinExpirationSeconds {
		errs = append(errs, field.Invalid(p.Child("expirationSeconds"), *spec.ExpirationSeconds, "may not specify a duration less than 600 seconds (10 minutes)"))
	}
	seen := sets.New[string]()
	for i, u := range spec.Usages {
		switch {
		case !knownUsages.Has(string(u)):
			errs = append(errs, field.NotSupported(p.Child("usages").Index(i), string(u), sets.List(knownUsages)))
		case seen.Has(string(u)):
			errs = append(errs, field.Duplicate(p.Child("usages").Index(i), string(u)))
		}
		seen.Insert(string(u))
	}
	return errs
}

// validateSignerName checks "<domain>/<path>": the domain a DNS-1123
// subdomain, the path a qualified name's shape, 571 characters at most.
func validateSignerName(name string, p *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	domain, path, ok := strings.Cut(name, "/")
	if !ok || path == "" || domain == "" {
		return field.ErrorList{field.Invalid(p, name, "must be a fully qualified domain and path of the form 'example.com/signer-name'")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(domain) {
		errs = append(errs, field.Invalid(p, name, "domain: "+msg))
	}
	if len(name) > 571 {
		errs = append(errs, field.TooLong(p, name, 571))
	}
	return errs
}

// validateStatus checks conditions and the certificate.
func validateStatus(st *certificatesv1.CertificateSigningRequestStatus, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[certificatesv1.RequestConditionType]bool{}
	for i, c := range st.Conditions {
		cp := p.Child("conditions").Index(i)
		if c.Type == "" {
			errs = append(errs, field.Required(cp.Child("type"), ""))
		}
		if seen[c.Type] {
			errs = append(errs, field.Duplicate(cp.Child("type"), c.Type))
		}
		seen[c.Type] = true
		switch c.Type {
		case certificatesv1.CertificateApproved, certificatesv1.CertificateDenied:
			if c.Status != corev1.ConditionTrue {
				errs = append(errs, field.NotSupported(cp.Child("status"), c.Status, []string{string(corev1.ConditionTrue)}))
			}
		default:
			if c.Status != corev1.ConditionTrue && c.Status != corev1.ConditionFalse && c.Status != corev1.ConditionUnknown {
				errs = append(errs, field.NotSupported(cp.Child("status"), c.Status, []string{"True", "False", "Unknown"}))
			}
		}
	}
	if seen[certificatesv1.CertificateApproved] && seen[certificatesv1.CertificateDenied] {
		errs = append(errs, field.Invalid(p.Child("conditions"), "Approved+Denied", "Approved and Denied conditions are mutually exclusive"))
	}
	if len(st.Certificate) > 0 {
		if err := checkCertificatePEM(st.Certificate); err != nil {
			errs = append(errs, field.Invalid(p.Child("certificate"), "<certificate data>", err.Error()))
		}
	}
	return errs
}

// checkCertificatePEM accepts one or more PEM CERTIFICATE blocks that
// parse, and nothing else.
func checkCertificatePEM(data []byte) error {
	n := 0
	for rest := data; len(strings.TrimSpace(string(rest))) > 0; n++ {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil || b.Type != "CERTIFICATE" || len(b.Headers) > 0 {
			return fmt.Errorf("must contain only PEM CERTIFICATE blocks")
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Errorf("block %d: %v", n, err)
		}
	}
	if n == 0 {
		return fmt.Errorf("must contain at least one certificate")
	}
	return nil
}

// validateStatusUpdate keeps Approved and Denied once set, and the
// certificate once issued.
func validateStatusUpdate(st, old *certificatesv1.CertificateSigningRequestStatus, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, t := range []certificatesv1.RequestConditionType{certificatesv1.CertificateApproved, certificatesv1.CertificateDenied} {
		if hasCondition(old, t) && !hasCondition(st, t) {
			errs = append(errs, field.Forbidden(p.Child("conditions"), fmt.Sprintf("updates may not remove a condition of type %q", t)))
		}
	}
	if len(old.Certificate) > 0 && string(st.Certificate) != string(old.Certificate) {
		errs = append(errs, field.Invalid(p.Child("certificate"), "<certificate data>", "updates may not modify existing certificate content"))
	}
	return errs
}

func hasCondition(st *certificatesv1.CertificateSigningRequestStatus, t certificatesv1.RequestConditionType) bool {
	for _, c := range st.Conditions {
		if c.Type == t {
			return true
		}
	}
	return false
}

// HasCondition reports whether csr has a condition of type t (True).
func HasCondition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// approvalUpdate is certificatesigningrequests/approval: the stored CSR
// with the sent status.conditions (and resourceVersion, for the
// compare-and-swap).
func approvalUpdate(nm, om map[string]any) map[string]any {
	omd, _ := om["metadata"].(map[string]any)
	nmd, _ := nm["metadata"].(map[string]any)
	if omd != nil && nmd != nil {
		omd["resourceVersion"] = nmd["resourceVersion"]
	}
	ost, _ := om["status"].(map[string]any)
	if ost == nil {
		ost = map[string]any{}
		om["status"] = ost
	}
	nst, _ := nm["status"].(map[string]any)
	if c, ok := nst["conditions"]; ok {
		ost["conditions"] = c
	} else {
		delete(ost, "conditions")
	}
	return om
}

// csrRow is kubectl's row: NAME AGE SIGNERNAME REQUESTOR
// REQUESTEDDURATION CONDITION ("Approved,Issued", "Pending").
func csrRow(obj store.Object) []any {
	csr := obj.(*certificatesv1.CertificateSigningRequest)
	var conds []string
	for _, c := range csr.Status.Conditions {
		if c.Status == corev1.ConditionTrue || c.Status == "" {
			conds = append(conds, string(c.Type))
		}
	}
	if len(csr.Status.Certificate) > 0 {
		conds = append(conds, "Issued")
	}
	cond := "Pending"
	if len(conds) > 0 {
		cond = strings.Join(conds, ",")
	}
	dur := "<none>"
	if csr.Spec.ExpirationSeconds != nil {
		dur = duration.HumanDuration(time.Duration(*csr.Spec.ExpirationSeconds) * time.Second)
	}
	return []any{csr.Name, registry.Age(obj), csr.Spec.SignerName, csr.Spec.Username, dur, cond}
}
