package main

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/orca-edge/orca/controlplane/auth/bootstrap"
)

// newTokenCommand is `orca token create|list|delete`: bootstrap tokens
// for joining nodes, as `kubeadm token`.
func newTokenCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Manage bootstrap tokens (nodes join with them), as kubeadm token"}
	cmd.AddCommand(newTokenCreateCommand(), newTokenListCommand(), newTokenDeleteCommand())
	return cmd
}

func newTokenCreateCommand() *cobra.Command {
	var o bootstrap.TokenOptions
	var printJoin bool
	cmd := &cobra.Command{
		Use:   "create [TOKEN]",
		Short: "Create a bootstrap token (random unless given) and print it",
		Long: `create stores a bootstrap token as the Secret bootstrap-token-<id> of
kube-system (type bootstrap.kubernetes.io/token) and prints it. A node
authenticates with it as system:bootstrap:<id> (group system:bootstrappers)
until --ttl passes, which lets it ask for its own certificate and nothing
more. With --print-join-command it prints the orca-agent command line that
joins a node: the apiserver, the token and the SHA-256 of the cluster CA's
public key, which the agent pins (kubeadm's --discovery-token-ca-cert-hash).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			api, err := connect(cmd)
			if err != nil {
				return err
			}
			tok := ""
			if len(args) == 1 {
				tok = args[0]
			}
			return createToken(cmd.OutOrStdout(), api, tok, o, printJoin)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.TTL, "ttl", 24*time.Hour, "how long the token is valid (0: forever)")
	f.StringVar(&o.Description, "description", "", "a human-friendly description of the token")
	f.StringSliceVar(&o.Usages, "usages", bootstrap.Usages, "what the token may be used for: signing, authentication")
	f.StringSliceVar(&o.ExtraGroups, "groups", nil, "extra groups of the token's user, each system:bootstrappers:<name>")
	f.BoolVar(&printJoin, "print-join-command", false, "print the orca-agent command line that joins a node with the token")
	return cmd
}

// createToken creates the token Secret and prints the token or the join
// command.
func createToken(out io.Writer, api *apiClient, tok string, o bootstrap.TokenOptions, printJoin bool) error {
	if tok == "" {
		var err error
		if tok, err = bootstrap.GenerateToken(); err != nil {
			return err
		}
	}
	s, err := bootstrap.Secret(tok, o, time.Now())
	if err != nil {
		return err
	}
	join := ""
	if printJoin {
		hash, err := caCertHash(api.caPEM)
		if err != nil {
			return err
		}
		join = fmt.Sprintf("orca-agent --server %s --token %s --discovery-token-ca-cert-hash %s", api.server, tok, hash)
	}
	code, err := do(api, http.MethodPost, "/api/v1/namespaces/"+bootstrap.SecretNamespace+"/secrets", s, nil)
	if err != nil {
		return fmt.Errorf("create bootstrap token: %w", err)
	}
	if code/100 != 2 {
		return fmt.Errorf("create bootstrap token: HTTP %d", code)
	}
	if printJoin {
		fmt.Fprintln(out, join)
		return nil
	}
	fmt.Fprintln(out, tok)
	return nil
}

// caCertHash is "sha256:<hex>" of the first CA certificate's
// SubjectPublicKeyInfo in pemData, as kubeadm's pubkeypin.
func caCertHash(pemData []byte) (string, error) {
	block, _ := pem.Decode(pemData)
	if block == nil || block.Type != "CERTIFICATE" {
		return "", errors.New("--print-join-command needs the cluster CA: the kubeconfig has no certificate-authority(-data)")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("the kubeconfig's CA: %w", err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

func newTokenListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the bootstrap tokens, as kubeadm token list",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := connect(cmd)
			if err != nil {
				return err
			}
			return listTokens(cmd.OutOrStdout(), api, time.Now())
		},
	}
}

// listTokens prints kubeadm's table: TOKEN TTL EXPIRES USAGES DESCRIPTION
// EXTRA GROUPS, one row per bootstrap token Secret, sorted by token.
func listTokens(out io.Writer, api *apiClient, now time.Time) error {
	var list corev1.SecretList
	if _, err := doOK(api, http.MethodGet, "/api/v1/namespaces/"+bootstrap.SecretNamespace+"/secrets", nil, &list); err != nil {
		return fmt.Errorf("list bootstrap tokens: %w", err)
	}
	var rows [][]string
	for _, s := range list.Items {
		id := string(s.Data[bootstrap.TokenIDKey])
		if s.Type != bootstrap.SecretType || s.Name != bootstrap.SecretPrefix+id || !bootstrap.IsValidTokenID(id) {
			continue
		}
		ttl, expires := "<forever>", "<never>"
		if exp, ok := bootstrap.Expiration(&s); !ok {
			ttl, expires = "<invalid>", string(s.Data[bootstrap.ExpirationKey])
		} else if !exp.IsZero() {
			expires = exp.UTC().Format(time.RFC3339)
			if left := exp.Sub(now); left > 0 {
				ttl = duration.ShortHumanDuration(left)
			} else {
				ttl = "<invalid>"
			}
		}
		var usages []string
		for _, u := range bootstrap.Usages {
			if string(s.Data[bootstrap.UsagePrefix+u]) == "true" {
				usages = append(usages, u)
			}
		}
		sort.Strings(usages)
		desc := string(s.Data[bootstrap.DescriptionKey])
		if desc == "" {
			desc = "<none>"
		}
		groups := string(s.Data[bootstrap.ExtraGroupsKey])
		if groups == "" {
			groups = "<none>"
		}
		rows = append(rows, []string{id + "." + string(s.Data[bootstrap.TokenSecretKey]), ttl, expires, strings.Join(usages, ","), desc, groups})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i][0] < rows[j][0] })
	w := tabwriter.NewWriter(out, 10, 4, 3, ' ', 0)
	fmt.Fprintln(w, "TOKEN\tTTL\tEXPIRES\tUSAGES\tDESCRIPTION\tEXTRA GROUPS")
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	return w.Flush()
}

func newTokenDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete TOKEN|ID...",
		Short: "Delete bootstrap tokens (given whole or by their ID)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			api, err := connect(cmd)
			if err != nil {
				return err
			}
			for _, a := range args {
				id := a
				if i, _, err := bootstrap.ParseToken(a); err == nil {
					id = i
				}
				if !bootstrap.IsValidTokenID(id) {
					return fmt.Errorf("%q is neither a bootstrap token nor a token ID ([a-z0-9]{6})", a)
				}
				code, err := do(api, http.MethodDelete, "/api/v1/namespaces/"+bootstrap.SecretNamespace+"/secrets/"+url.PathEscape(bootstrap.SecretPrefix+id), nil, nil)
				if err != nil {
					return fmt.Errorf("delete bootstrap token %s: %w", id, err)
				}
				if code == http.StatusNotFound {
					return fmt.Errorf("bootstrap token %q not found", id)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "bootstrap token %q deleted\n", id)
			}
			return nil
		},
	}
}
