package csr

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/certificates"
	"github.com/orca-edge/orca/controlplane/store"
)

// SignerName names the signer in logs and queue metrics.
const SignerName = "csrsigning"

// DefaultSigningDuration is the longest a signed certificate lives
// (kube-controller-manager's --cluster-signing-duration: 1 year); a CSR's
// spec.expirationSeconds may only shorten it.
const DefaultSigningDuration = 365 * 24 * time.Hour

// backdate is how far before now a certificate's NotBefore is set, for
// clock skew (Kubernetes: 5 minutes).
const backdate = 5 * time.Minute

// CA is the certificate authority that signs: the cluster CA.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// Signer issues the certificates of approved CSRs of the kubernetes.io
// signers with one CA, as kube-controller-manager's csrsigning
// controller: kube-apiserver-client-kubelet (checked again with
// ValidateKubeletClientCSR), kube-apiserver-client (client auth only) and
// kubelet-serving (server auth, DNS/IP names). A CSR of another signer is
// not its business; one the signer refuses gets a Failed condition with
// the reason.
type Signer struct {
	s        *store.Store
	reg      *registry.Registry
	csrs     *store.Informer
	ca       CA
	duration time.Duration
	queue    workqueue.TypedRateLimitingInterface[string]
	now      func() time.Time
}

// NewSigner returns the signer; duration caps the certificates' life
// (0: DefaultSigningDuration).
func NewSigner(s *store.Store, reg *registry.Registry, csrs *store.Informer, ca CA, duration time.Duration) *Signer {
	if duration <= 0 {
		duration = DefaultSigningDuration
	}
	g := &Signer{s: s, reg: reg, csrs: csrs, ca: ca, duration: duration, queue: ctrlutil.NewQueue(SignerName), now: time.Now}
	csrs.AddHandler(store.Handler{
		OnAdd:    func(o store.Object) { g.queue.Add(o.GetName()) },
		OnUpdate: func(_, n store.Object) { g.queue.Add(n.GetName()) },
	})
	return g
}

// Run signs with workers goroutines until ctx ends.
func (g *Signer) Run(ctx context.Context, workers int) {
	ctrlutil.RunWorkers(ctx, SignerName, g.queue, workers, g.sync)
}

var signers = []string{KubeAPIServerClientKubeletSigner, KubeAPIServerClientSigner, KubeletServingSigner}

func (g *Signer) sync(ctx context.Context, name string) error {
	obj, ok := g.csrs.Get("", name)
	if !ok {
		return nil
	}
	csr := obj.(*certificatesv1.CertificateSigningRequest)
	if !slices.Contains(signers, csr.Spec.SignerName) || len(csr.Status.Certificate) > 0 ||
		!certificates.HasCondition(csr, certificatesv1.CertificateApproved) || certificates.HasCondition(csr, certificatesv1.CertificateFailed) {
		return nil
	}
	certPEM, signErr := g.sign(csr)
	uid := csr.UID
	_, err := g.reg.GuaranteedUpdateStatus(ctx, g.s, certificates.CertificateSigningRequests, "", name, &store.Preconditions{UID: &uid},
		func(cur store.Object) (store.Object, error) {
			c := cur.(*certificatesv1.CertificateSigningRequest)
			if len(c.Status.Certificate) > 0 || certificates.HasCondition(c, certificatesv1.CertificateFailed) {
				return nil, errNothingToDo
			}
			if signErr != nil {
				now := metav1.Now()
				c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
					Type: certificatesv1.CertificateFailed, Status: corev1.ConditionTrue, Reason: "SignerValidationFailure",
					Message: signErr.Error(), LastUpdateTime: now, LastTransitionTime: now})
				return c, nil
			}
			c.Status.Certificate = certPEM
			return c, nil
		})
	if errors.Is(err, errNothingToDo) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sign certificate signing request %s: %w", name, err)
	}
	return nil
}

// sign issues the certificate of csr as PEM.
func (g *Signer) sign(csr *certificatesv1.CertificateSigningRequest) ([]byte, error) {
	req, err := parse(csr)
	if err != nil {
		return nil, err
	}
	var ext []x509.ExtKeyUsage
	switch csr.Spec.SignerName {
	case KubeAPIServerClientKubeletSigner:
		if err := ValidateKubeletClientCSR(req, csr.Spec.Usages); err != nil {
			return nil, err
		}
	case KubeAPIServerClientSigner:
		if len(req.DNSNames) > 0 || len(req.IPAddresses) > 0 || len(req.URIs) > 0 {
			return nil, errors.New("a kube-apiserver-client certificate may not carry DNS, IP or URI names")
		}
		if !slices.Contains(csr.Spec.Usages, certificatesv1.UsageClientAuth) || slices.Contains(csr.Spec.Usages, certificatesv1.UsageServerAuth) {
			return nil, errors.New("a kube-apiserver-client certificate must have usage client auth and not server auth")
		}
	case KubeletServingSigner:
		if !slices.Equal(req.Subject.Organization, []string{NodesGroup}) || len(req.Subject.CommonName) <= len(NodeUserPrefix) || req.Subject.CommonName[:len(NodeUserPrefix)] != NodeUserPrefix {
			return nil, errors.New("a kubelet-serving certificate must be for CN=system:node:<name>, O=system:nodes")
		}
		if len(req.DNSNames)+len(req.IPAddresses) == 0 || len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
			return nil, errors.New("a kubelet-serving certificate needs DNS or IP names and no e-mail or URI names")
		}
		if !slices.Contains(csr.Spec.Usages, certificatesv1.UsageServerAuth) || slices.Contains(csr.Spec.Usages, certificatesv1.UsageClientAuth) {
			return nil, errors.New("a kubelet-serving certificate must have usage server auth and not client auth")
		}
	}
	var ku x509.KeyUsage
	for _, u := range csr.Spec.Usages {
		switch u {
		case certificatesv1.UsageDigitalSignature:
			ku |= x509.KeyUsageDigitalSignature
		case certificatesv1.UsageKeyEncipherment:
			ku |= x509.KeyUsageKeyEncipherment
		case certificatesv1.UsageClientAuth:
			ext = append(ext, x509.ExtKeyUsageClientAuth)
		case certificatesv1.UsageServerAuth:
			ext = append(ext, x509.ExtKeyUsageServerAuth)
		default:
			return nil, fmt.Errorf("usage %q is not allowed by signer %s", u, csr.Spec.SignerName)
		}
	}
	now := g.now()
	life := g.duration
	if s := csr.Spec.ExpirationSeconds; s != nil && time.Duration(*s)*time.Second < life {
		life = time.Duration(*s) * time.Second
	}
	notAfter := now.Add(life)
	if notAfter.After(g.ca.Cert.NotAfter) {
		notAfter = g.ca.Cert.NotAfter
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: req.Subject,
		DNSNames: req.DNSNames, IPAddresses: req.IPAddresses, EmailAddresses: req.EmailAddresses, URIs: req.URIs,
		NotBefore: now.Add(-backdate), NotAfter: notAfter,
		KeyUsage: ku, ExtKeyUsage: ext, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, g.ca.Cert, req.PublicKey, g.ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
