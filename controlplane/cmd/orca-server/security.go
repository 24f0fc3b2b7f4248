package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/orca-edge/orca/controlplane/auth/natsauth"
	"github.com/orca-edge/orca/controlplane/security"
)

// addSecurityFlags adds the TLS and authentication flags (kube-apiserver's
// and k3s' names).
func addSecurityFlags(f *pflag.FlagSet, o *options) {
	f.StringVar(&o.sec.TLSCertFile, "tls-cert-file", "", "serving certificate (PEM) of the apiserver and NATS instead of the one created under <data-dir>/tls")
	f.StringVar(&o.sec.TLSPrivateKeyFile, "tls-private-key-file", "", "key of --tls-cert-file")
	f.StringVar(&o.sec.ClientCAFile, "client-ca-file", "", "CA bundle (PEM) client certificates are verified with instead of the cluster CA")
	f.StringSliceVar(&o.sec.TLSSANs, "tls-san", nil, "extra DNS names or IPs of the created serving certificate (repeatable)")
	f.StringVar(&o.sec.TokenAuthFile, "token-auth-file", "", "static bearer tokens, CSV: token,user,uid,\"group1,group2\"")
	f.StringVar(&o.insecureAddr, "insecure-http-addr", "", "also serve plain HTTP on this loopback address (still authenticated; tokens only)")
	f.StringVar(&o.kubeconfig, "write-kubeconfig", "", "where the admin kubeconfig is written (default <data-dir>/admin.kubeconfig)")
	f.StringVar(&o.kubeconfigMode, "write-kubeconfig-mode", "0600", "file mode of --write-kubeconfig (octal)")
	f.BoolVar(&o.natsTLS, "nats-tls", true, "embedded NATS: clients connect over TLS only (the serving certificate; agents verify it with the cluster CA)")
	f.StringVar(&o.natsCAFile, "nats-ca-file", "", "with --nats-url: CA bundle (PEM) the external NATS servers' certificates are verified with (default: the system's)")
}

// natsServerTLS is the embedded NATS server's TLS configuration, nil with
// --nats-tls=false.
func natsServerTLS(o options, m *security.Material) *tls.Config {
	if !o.natsTLS {
		return nil
	}
	return m.NATSServerTLS()
}

// withNATSClientTLS adds to opts how orca-server verifies its NATS server:
// with the cluster CA for the embedded one, with --nats-ca-file (or the
// system's CAs) for an external one.
func withNATSClientTLS(opts []nats.Option, o options, m *security.Material) ([]nats.Option, error) {
	switch {
	case o.natsURL == "":
		return append(opts, m.NATSClientTLS()), nil
	case o.natsCAFile != "":
		if _, err := os.Stat(o.natsCAFile); err != nil {
			return nil, fmt.Errorf("--nats-ca-file: %w", err)
		}
		return append(opts, nats.RootCAs(o.natsCAFile)), nil
	}
	return opts, nil
}

// withNATSCA puts the CA agents verify the embedded NATS server with into
// the NATS credentials handed out (NATSCredentialRequest status.caBundle).
func withNATSCA(iss *natsauth.Issuer, o options, m *security.Material) *natsauth.Issuer {
	if iss != nil && o.natsURL == "" && o.natsTLS {
		iss.CABundle = m.CA.CertPEM
	} else if iss != nil && o.natsCAFile != "" {
		if pem, err := os.ReadFile(o.natsCAFile); err == nil {
			iss.CABundle = pem
		}
	}
	return iss
}

// loadSecurity creates or reads the certificates under <data-dir>/tls and
// writes the admin kubeconfig for the apiserver's address.
func loadSecurity(o options) (*security.Material, error) {
	o.sec.DataDir = o.dataDir
	m, err := security.Load(o.sec)
	if err != nil {
		return nil, err
	}
	if !o.apiserver {
		return m, nil
	}
	mode, err := strconv.ParseUint(o.kubeconfigMode, 8, 32)
	if err != nil {
		return nil, fmt.Errorf("--write-kubeconfig-mode %q: want an octal mode such as 0600", o.kubeconfigMode)
	}
	path := o.kubeconfig
	if path == "" {
		path = filepath.Join(o.dataDir, "admin.kubeconfig")
	}
	if err := m.WriteAdminKubeconfig(path, os.FileMode(mode), "https://"+clientAddr(o.apiAddr)); err != nil {
		return nil, err
	}
	slog.Info("admin kubeconfig written", "path", path, "hint", "export KUBECONFIG="+path)
	return m, nil
}

// clientAddr is the address clients reach listen at: an unspecified host
// (":6443", "0.0.0.0:6443") becomes 127.0.0.1.
func clientAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// localURL is the NATS URL u ("tls://0.0.0.0:4222") with an unspecified
// host replaced by 127.0.0.1, which the serving certificate names.
func localURL(u string) string {
	scheme, hostport, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	return scheme + "://" + clientAddr(hostport)
}
