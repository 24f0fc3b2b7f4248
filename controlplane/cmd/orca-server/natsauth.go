package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/orca-edge/orca/controlplane/auth/natsauth"
	"github.com/orca-edge/orca/controlplane/store"
)

// natsAuthOptions are the flags of NATS accounts and permissions
// (controlplane/auth/natsauth).
type natsAuthOptions struct {
	accounts  bool
	advertise []string
}

func addNATSAuthFlags(f *pflag.FlagSet, o *natsAuthOptions) {
	f.BoolVar(&o.accounts, "nats-accounts", true, "embedded NATS: JWT mode with orca as the operator (keys under <data-dir>/tls/nats): every client needs a user JWT; the control plane mints its own, nodes get node permissions (their own key space only) and people read-only ones with NATSCredentialRequests (`orca nats creds`)")
	f.StringSliceVar(&o.advertise, "nats-advertise", nil, "NATS URLs handed to agents and people with their NATS credentials (default: --nats-listen, or every non-loopback address of this host when it listens on all)")
}

// natsAuthority loads (or creates on first start) orca's NATS operator
// keys, or returns nil when NATS accounts are off. With an external NATS
// (--nats-url) the cluster must trust orca's operator: `orca-server
// nats-config` prints the configuration it needs.
func natsAuthority(o options) (*natsauth.Authority, error) {
	if !o.nats.accounts {
		return nil, nil
	}
	return natsauth.LoadOrCreate(natsKeyDir(o.dataDir))
}

func natsKeyDir(dataDir string) string { return filepath.Join(dataDir, "tls", "nats") }

// newNATSConfigCommand prints the nats-server configuration that makes an
// external NATS cluster trust orca's operator and serve its accounts
// (memory resolver with the two account JWTs preloaded).
func newNATSConfigCommand() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "nats-config",
		Short: "print the nats-server settings (operator, accounts) for an external NATS cluster to trust orca's NATS accounts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := natsauth.LoadOrCreate(natsKeyDir(dataDir))
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), a.ServerConfig())
			return err
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "/var/lib/orca/server", "orca-server's data directory (the keys are under tls/nats)")
	return cmd
}

// natsControlPlaneOptions are the connect options of the control plane's
// own NATS user (every subject of the orca account; its key never leaves
// the process).
func natsControlPlaneOptions(a *natsauth.Authority) ([]nats.Option, error) {
	if a == nil {
		return nil, nil
	}
	return a.ConnectOption(natsauth.ControlPlane())
}

// natsBootstrap creates the buckets node agents read, which they have no
// right to create (their stores are BindOnly).
func natsBootstrap(ctx context.Context, st *store.Store) error {
	return st.EnsureBuckets(ctx, store.NodePods, store.RuntimeClasses, store.Services, store.Endpoints, store.EndpointSlices, store.Nodes)
}

// natsIssuer answers NATSCredentialRequests with a's keys, or is nil.
func natsIssuer(o options, a *natsauth.Authority, scheme string) *natsauth.Issuer {
	if a == nil {
		return nil
	}
	servers := o.nats.advertise
	if len(servers) == 0 && o.natsURL != "" {
		servers = strings.Split(o.natsURL, ",")
	} else if len(servers) == 0 {
		servers = advertised(o.natsListen, scheme)
	}
	slog.Info("NATS accounts on: clients need user JWTs", "account", a.Account(), "advertise", servers)
	return &natsauth.Issuer{Authority: a, Servers: servers}
}

// advertised returns scheme://host:port for the listen address, or for
// every non-loopback address of this host when it listens on all.
func advertised(listen, scheme string) []string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsUnspecified() {
		return []string{fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(host, port))}
	}
	addrs, _ := net.InterfaceAddrs()
	var out []string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			out = append(out, scheme+"://"+net.JoinHostPort(n.IP.String(), port))
		}
	}
	if len(out) == 0 {
		out = append(out, scheme+"://"+net.JoinHostPort("127.0.0.1", port))
	}
	return out
}
