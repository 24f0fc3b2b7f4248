package main

import (
	"fmt"
	"net/http"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// apiClient is how orca reaches the apiserver: its URL and an HTTP client
// carrying the kubeconfig's credentials and CA.
type apiClient struct {
	server string
	http   *http.Client
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
	return &apiClient{server: cfg.Host, http: hc}, nil
}
