package main

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// apiClient is how orca reaches the apiserver: its URL and an HTTP client
// carrying the kubeconfig's credentials and CA.
type apiClient struct {
	server string
	http   *http.Client
	caPEM  []byte // the kubeconfig's CA bundle, when it names one
}

// addConnectionFlags adds --kubeconfig and --server, as kubectl's.
func addConnectionFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.String("kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, as kubectl)")
	f.String("server", "", "apiserver URL, overriding the kubeconfig's (default "+DefaultServer+" without a kubeconfig)")
}

// connect builds the apiClient of cmd's flags as kubectl does: the
// kubeconfig named by --kubeconfig, else the files of $KUBECONFIG, else
// ~/.kube/config, its current context; --server replaces its server.
// Without any kubeconfig the server is --server or DefaultServer, with no
// credentials (requests then get 401) and the system's CAs. An explicit
// --kubeconfig that cannot be read is an error.
func connect(cmd *cobra.Command) (*apiClient, error) {
	path, _ := cmd.Flags().GetString("kubeconfig")
	server, _ := cmd.Flags().GetString("server")
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	overrides := &clientcmd.ConfigOverrides{}
	overrides.ClusterInfo.Server = server
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		if server == "" {
			server = DefaultServer
		}
		cfg, err = &rest.Config{Host: server}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
	}
	return &apiClient{server: cfg.Host, http: hc, caPEM: ca}, nil
}

// natsTLS is the nats.go option of a direct NATS connection (--nats-url):
// a NATS server that asks for TLS is verified with the kubeconfig's CA
// (orca-server's cluster CA signs both the apiserver's and NATS'
// certificates), or the system's CAs without a kubeconfig. A server
// without TLS is still reached (the option does not require TLS). With
// --nats-creds it authenticates with that .creds file.
func natsTLS(cmd *cobra.Command) (nats.Option, error) {
	path, _ := cmd.Flags().GetString("kubeconfig")
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	var tc *tls.Config
	switch {
	case clientcmd.IsEmptyConfig(err):
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
	case err != nil:
		return nil, fmt.Errorf("kubeconfig: %w", err)
	default:
		c := rest.CopyConfig(cfg)
		c.CertData, c.KeyData, c.CertFile, c.KeyFile = nil, nil, "", "" // NATS identifies users by credentials
		c.ServerName = ""
		if tc, err = rest.TLSConfigFor(c); err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tc.ServerName = "" // the NATS host, not the apiserver's
	}
	creds, _ := cmd.Flags().GetString("nats-creds")
	return func(o *nats.Options) error {
		o.TLSConfig = tc
		if creds != "" { // orca-server's NATS takes only user JWTs: `orca nats creds -o`
			return nats.UserCredentials(creds)(o)
		}
		return nil
	}, nil
}
