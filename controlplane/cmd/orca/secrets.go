package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
)

func newSecretsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "secrets", Short: "Operate on Secrets at rest"}
	var namespace string
	var all bool
	re := &cobra.Command{
		Use:   "reencrypt",
		Short: "Rewrite every Secret so it is stored with the first key of the server's encryption configuration",
		Long: `reencrypt reads every Secret (of --namespace, or of all namespaces with
-A) and writes it back unchanged (PUT with its resourceVersion). The server
rewrites a Secret whose stored value was encrypted with a key that is no
longer the first of its --encryption-provider-config, or stored in plain
text, with the first key; a Secret already stored with it is not written.
It is Kubernetes' "kubectl get secrets -A -o json | kubectl replace -f -"
step of a key rotation, without the race: a Secret changed meanwhile (409)
was rewritten by that change, and is skipped.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := connect(cmd)
			if err != nil {
				return err
			}
			ns := namespace
			if all {
				ns = ""
			}
			return reencryptSecrets(cmd.Context(), cmd.OutOrStdout(), api, ns)
		},
	}
	re.Flags().StringVarP(&namespace, "namespace", "n", "default", "namespace whose Secrets to rewrite")
	re.Flags().BoolVarP(&all, "all-namespaces", "A", false, "rewrite the Secrets of every namespace")
	cmd.AddCommand(re)
	return cmd
}

// reencryptSecrets lists the Secrets of namespace ("" = all) in pages of
// 500 and PUTs each back; it prints one line per rewritten Secret and a
// summary.
func reencryptSecrets(ctx context.Context, out io.Writer, api *apiClient, namespace string) error {
	coll := "/api/v1/secrets"
	if namespace != "" {
		coll = "/api/v1/namespaces/" + url.PathEscape(namespace) + "/secrets"
	}
	var rewritten, current, skipped int
	cont := ""
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		q := url.Values{"limit": {"500"}}
		if cont != "" {
			q.Set("continue", cont)
		}
		var list corev1.SecretList
		if _, err := doOK(api, http.MethodGet, coll+"?"+q.Encode(), nil, &list); err != nil {
			return fmt.Errorf("list secrets: %w", err)
		}
		for i := range list.Items {
			s := &list.Items[i]
			s.APIVersion, s.Kind = "v1", "Secret"
			path := "/api/v1/namespaces/" + url.PathEscape(s.Namespace) + "/secrets/" + url.PathEscape(s.Name)
			var after corev1.Secret
			code, err := do(api, http.MethodPut, path, s, &after)
			switch {
			case code == http.StatusConflict || code == http.StatusNotFound:
				skipped++ // written (so re-encrypted) or deleted meanwhile
			case err != nil:
				return fmt.Errorf("rewrite secret %s/%s: %w", s.Namespace, s.Name, err)
			case code/100 != 2:
				return fmt.Errorf("rewrite secret %s/%s: HTTP %d", s.Namespace, s.Name, code)
			case after.ResourceVersion != s.ResourceVersion:
				rewritten++
				fmt.Fprintf(out, "secret/%s rewritten (namespace %s)\n", s.Name, s.Namespace)
			default:
				current++
			}
		}
		if cont = list.Continue; cont == "" {
			break
		}
	}
	fmt.Fprintf(out, "%d secrets rewritten, %d already stored with the first key, %d changed or deleted meanwhile\n", rewritten, current, skipped)
	return nil
}
