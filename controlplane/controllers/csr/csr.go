// Package csr holds the CertificateSigningRequest controllers of
// kube-controller-manager: the approver of node client certificates
// (pkg/controller/certificates/approver, "csrapproving") and the signer
// of the kubernetes.io signers with the cluster CA
// (pkg/controller/certificates/signer, "csrsigning").
//
// A node joining with a bootstrap token (user system:bootstrap:<id>,
// group system:bootstrappers) posts a CSR for signer
// kubernetes.io/kube-apiserver-client-kubelet with subject
// CN=system:node:<name>, O=system:nodes; the approver approves it, the
// signer issues the certificate into status.certificate, and the node
// authenticates with it from then on (user system:node:<name>). A node
// renews its certificate the same way, as itself.
package csr

import (
	"crypto/x509"
	"fmt"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/orca-edge/orca/controlplane/registry/certificates"
)

// The kubernetes.io signer names, as Kubernetes'.
const (
	KubeAPIServerClientSigner        = certificatesv1.KubeAPIServerClientSignerName
	KubeAPIServerClientKubeletSigner = certificatesv1.KubeAPIServerClientKubeletSignerName
	KubeletServingSigner             = certificatesv1.KubeletServingSignerName
)

// Groups and prefixes of the node users.
const (
	NodesGroup         = "system:nodes"
	NodeUserPrefix     = "system:node:"
	BootstrappersGroup = "system:bootstrappers"
)

// kubeletClientUsages are the usages a kubelet client CSR may have (both
// sets of Kubernetes' ValidateKubeletClientCSR: with and without key
// encipherment, which only RSA keys need).
var kubeletClientUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth}

// ValidateKubeletClientCSR checks a kube-apiserver-client-kubelet request
// as Kubernetes' ValidateKubeletClientCSR: O is exactly [system:nodes],
// CN starts with system:node:, no DNS names, e-mail addresses, IP
// addresses or URIs, and usages include client auth and are among
// digital signature, key encipherment and client auth.
func ValidateKubeletClientCSR(req *x509.CertificateRequest, usages []certificatesv1.KeyUsage) error {
	if !slices.Equal(req.Subject.Organization, []string{NodesGroup}) {
		return fmt.Errorf("subject organization is not %s", NodesGroup)
	}
	if !strings.HasPrefix(req.Subject.CommonName, NodeUserPrefix) || len(req.Subject.CommonName) == len(NodeUserPrefix) {
		return fmt.Errorf("subject common name does not begin with %s", NodeUserPrefix)
	}
	if len(req.DNSNames) > 0 || len(req.EmailAddresses) > 0 || len(req.IPAddresses) > 0 || len(req.URIs) > 0 {
		return fmt.Errorf("DNS, email, IP and URI subjectAltNames are not allowed")
	}
	if !slices.Contains(usages, certificatesv1.UsageClientAuth) {
		return fmt.Errorf("usages do not include client auth")
	}
	for _, u := range usages {
		if !slices.Contains(kubeletClientUsages, u) {
			return fmt.Errorf("usage %q is not allowed (allowed: digital signature, key encipherment, client auth)", u)
		}
	}
	return nil
}

// parse decodes the CSR's request (already validated at create).
func parse(csr *certificatesv1.CertificateSigningRequest) (*x509.CertificateRequest, error) {
	return certificates.ParseRequest(csr.Spec.Request)
}
