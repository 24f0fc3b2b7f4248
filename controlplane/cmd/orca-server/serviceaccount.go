package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/orca-edge/orca/controlplane/security"
)

// addServiceAccountFlags adds kube-apiserver's ServiceAccount token flags
// and kube-controller-manager's --cluster-signing-duration.
func addServiceAccountFlags(f *pflag.FlagSet, o *options) {
	sa := &o.sec.ServiceAccounts
	f.StringVar(&sa.SigningKeyFile, "service-account-signing-key-file", "", "PEM private key ServiceAccount tokens are signed with (default <data-dir>/tls/service-account.key, created on first start)")
	f.StringSliceVar(&sa.KeyFiles, "service-account-key-file", nil, "PEM file of more public keys ServiceAccount tokens verify with, e.g. a previous signing key's (repeatable)")
	f.StringSliceVar(&sa.Issuers, "service-account-issuer", nil, "issuer of ServiceAccount tokens; the first is written, all are accepted (repeatable; default https://kubernetes.default.svc.cluster.local)")
	f.StringSliceVar(&sa.APIAudiences, "api-audiences", nil, "audiences tokens must have one of (default: the first issuer)")
	f.DurationVar(&sa.MaxTokenExpiration, "service-account-max-token-expiration", 0, "longest lifetime a TokenRequest gets (0: as requested, up to 2^32 s)")
	f.DurationVar(&o.clusterSigningDuration, "cluster-signing-duration", 365*24*time.Hour, "longest lifetime of certificates the CSR signer issues (node client certificates)")
}

// rootCA is the CA bundle pods verify the apiserver with (ConfigMap
// kube-root-ca.crt): the serving certificate's CA, or the cluster CA when
// --tls-cert-file gives a certificate of another CA.
func rootCA(m *security.Material) []byte {
	if len(m.ServingCAPEM) > 0 {
		return m.ServingCAPEM
	}
	return m.CA.CertPEM
}
