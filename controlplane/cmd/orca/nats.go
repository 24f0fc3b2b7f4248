package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/auth/natsauth"
)

// newNATSCommand is `orca nats`: NATS credentials for people.
func newNATSCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "nats", Short: "NATS credentials for inspecting the cluster with the nats CLI"}
	cmd.AddCommand(newNATSCredsCommand())
	return cmd
}

func newNATSCredsCommand() *cobra.Command {
	var (
		readOnly bool
		output   string
		ttl      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "creds",
		Short: "mint NATS credentials (a .creds file) for the current user",
		Long: `orca nats creds creates an nkey here and asks the apiserver for a NATS user
JWT for it (a NATSCredentialRequest); the seed never leaves this machine.
With --read-only the user may read every KV bucket but secrets
(nats kv ls|get|watch) and write nothing; without it only system:masters
members get full access. The .creds file is written with mode 0600, e.g.:

  orca nats creds --read-only -o view.creds
  nats --creds view.creds --server <url> kv watch pods`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output == "" {
				return fmt.Errorf("-o: the .creds file to write is required")
			}
			api, err := connect(cmd)
			if err != nil {
				return err
			}
			kp, err := nkeys.CreateUser()
			if err != nil {
				return err
			}
			pub, _ := kp.PublicKey()
			req := natsauth.NATSCredentialRequest{TypeMeta: metav1.TypeMeta{APIVersion: natsauth.Group + "/" + natsauth.Version, Kind: natsauth.Kind},
				Spec: natsauth.NATSCredentialRequestSpec{PublicKey: pub, ReadOnly: readOnly}}
			if ttl > 0 {
				s := int64(ttl / time.Second)
				req.Spec.ExpirationSeconds = &s
			}
			body, _ := json.Marshal(&req)
			r, err := http.NewRequestWithContext(cmd.Context(), http.MethodPost, api.server+"/apis/orca.dev/v1/natscredentialrequests", bytes.NewReader(body))
			if err != nil {
				return err
			}
			r.Header.Set("Content-Type", "application/json")
			resp, err := api.http.Do(r)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			if resp.StatusCode != http.StatusCreated {
				var st metav1.Status
				if json.Unmarshal(data, &st) == nil && st.Message != "" {
					return fmt.Errorf("NATSCredentialRequest: %s", st.Message)
				}
				return fmt.Errorf("NATSCredentialRequest: %s", resp.Status)
			}
			var out natsauth.NATSCredentialRequest
			if err := json.Unmarshal(data, &out); err != nil {
				return fmt.Errorf("NATSCredentialRequest: %w", err)
			}
			seed, _ := kp.Seed()
			creds, err := jwt.FormatUserConfig(out.Status.JWT, seed)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(output), 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(output, creds, 0o600); err != nil {
				return err
			}
			tlsca := ""
			if len(out.Status.CABundle) > 0 {
				ca := strings.TrimSuffix(output, ".creds") + ".ca.crt"
				if err := os.WriteFile(ca, out.Status.CABundle, 0o644); err != nil {
					return err
				}
				tlsca = " --tlsca " + ca
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "wrote %s: NATS user %s, expires %s\n", output, out.Status.User, out.Status.ExpirationTimestamp.UTC().Format(time.RFC3339))
			for _, s := range out.Status.Servers {
				fmt.Fprintf(w, "  nats --creds %s%s --server %s kv ls\n", output, tlsca, s)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&readOnly, "read-only", false, "read-only credentials (every bucket but secrets); required unless you are in system:masters")
	f.StringVarP(&output, "output", "o", "", "the .creds file to write (mode 0600)")
	f.DurationVar(&ttl, "ttl", 0, "lifetime of the credentials (default 24h, at most 7 days, at least 10m)")
	return cmd
}
