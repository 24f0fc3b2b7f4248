package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/orca-edge/orca/controlplane/pki"
)

// newIssueCertificateCommand returns `orca-server issue-certificate`: a
// serving certificate (server and client auth) of the cluster CA for
// another machine, such as a server of an external NATS cluster (its
// client port and its routes).
func newIssueCertificateCommand() *cobra.Command {
	var dataDir, name, out string
	var sans []string
	cmd := &cobra.Command{
		Use:   "issue-certificate --name NAME --san HOST[,IP...] --out DIR",
		Short: "issue a certificate of the cluster CA (for the servers of an external NATS cluster: clients and routes)",
		Long: `issue-certificate signs a certificate with orca's cluster CA
(<data-dir>/tls/ca.crt and ca.key, created on orca-server's first start, or now
if missing) for the given SANs, valid 1 year, usable by a server and as a
client (NATS routes present it both ways). It writes DIR/NAME.crt,
DIR/NAME.key (0600) and DIR/ca.crt.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" || len(sans) == 0 || out == "" {
				return errors.New("--name, --san and --out are required")
			}
			ca, err := pki.LoadOrCreateCA(filepath.Join(dataDir, "tls"))
			if err != nil {
				return err
			}
			kp, err := ca.IssueServing(name, sans)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			for _, f := range []struct {
				name string
				data []byte
				mode os.FileMode
			}{{name + ".key", kp.KeyPEM, 0o600}, {name + ".crt", kp.CertPEM, 0o644}, {"ca.crt", ca.CertPEM, 0o644}} {
				if err := pki.WriteFileAtomic(filepath.Join(out, f.name), f.data, f.mode); err != nil {
					return err
				}
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "wrote %s, %s and %s (SANs %v, valid until %s)\n",
				filepath.Join(out, name+".crt"), filepath.Join(out, name+".key"), filepath.Join(out, "ca.crt"), sans, kp.Cert.NotAfter.Format("2006-01-02"))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "/var/lib/orca/server", "orca-server's data directory (the CA is under tls/)")
	f.StringVar(&name, "name", "", "the certificate's common name and file name")
	f.StringSliceVar(&sans, "san", nil, "DNS names and IPs the certificate is for (repeatable or comma-separated)")
	f.StringVar(&out, "out", "", "directory to write NAME.crt, NAME.key and ca.crt to")
	return cmd
}
