package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/orca-edge/orca/wasm"
)

// DefaultServer is the apiserver address orca talks to by default.
const DefaultServer = "https://127.0.0.1:6443"

// WasmModulesPath is the apiserver route a module is PUT to, followed by
// the url-escaped "name:tag".
const WasmModulesPath = "/apis/orca.dev/v1/wasmmodules/"

func newWasmCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "wasm",
		Short: "Manage WebAssembly modules",
	}
	cmd.AddCommand(newWasmPushCommand(), newWasmListCommand())
	return cmd
}

// newWasmListCommand returns `orca wasm ls`: the module tags in the
// cluster's module store, from GET /apis/orca.dev/v1/wasmmodules.
func newWasmListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the WASM module tags in the cluster's module store",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return listDigests(cmd, strings.TrimSuffix(WasmModulesPath, "/"), "modules")
		},
	}
}

// listDigests prints NAME, DIGEST, SIZE of the list of objects stored by
// digest at the apiserver's path (WASM modules, images).
func listDigests(cmd *cobra.Command, path, what string) error {
	api, err := connect(cmd)
	if err != nil {
		return err
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Digest string `json:"digest"`
				Size   uint64 `json:"size"`
			} `json:"spec"`
		} `json:"items"`
	}
	if _, err := doOK(api, http.MethodGet, path, nil, &list); err != nil {
		return fmt.Errorf("list %s: %w", what, err)
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 3, ' ', 0)
	fmt.Fprintln(w, "NAME\tDIGEST\tSIZE")
	for _, m := range list.Items {
		fmt.Fprintf(w, "%s\t%s\t%d\n", m.Metadata.Name, m.Spec.Digest, m.Spec.Size)
	}
	return w.Flush()
}

// pushOptions are the flags of `orca wasm push` and `orca image push`.
type pushOptions struct {
	name     string
	api      *apiClient
	natsTLS  nats.Option // with --nats-url: the kubeconfig's CA for a NATS server with TLS
	natsURL  string
	timeout  time.Duration
	progress string
}

// imagePushOptions are pushOptions with the image push's run.
type imagePushOptions pushOptions

func newWasmPushCommand() *cobra.Command {
	o := pushOptions{}
	cmd := &cobra.Command{
		Use:   "push FILE --name NAME[:TAG]",
		Short: "Push a WASM module to the cluster's module store and print its digest",
		Long: `Push a WASM module to the cluster's module store (the NATS Object Store
bucket wasm-modules) under NAME[:TAG] and print its digest (sha256:<hex>).
Pods then reference it as image NAME:TAG or NAME@<digest> with
runtimeClassName: wasm.

By default the module is PUT to the apiserver (--server); with --nats-url
it is pushed straight into NATS.`,
		Example: `  GOOS=wasip1 GOARCH=wasm go build -o hello.wasm ./examples/hello-wasm
  orca wasm push hello.wasm --name hello-wasm:v1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.natsURL == "" {
				o.api, err = connect(cmd)
			} else {
				o.natsTLS, err = natsTLS(cmd)
			}
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.name, "name", "", "module name and tag, e.g. hello-wasm:v1 (required; no tag means :latest)")
	f.StringVar(&o.natsURL, "nats-url", "", "push directly to this NATS server instead of the apiserver")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up after this long")
	f.StringVar(&o.progress, "progress", progressAuto, "show the upload's progress: auto (on a terminal), always or never")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

func (o *pushOptions) run(ctx context.Context, out, errOut io.Writer, file string) error {
	if _, err := wasm.ParseRef(o.name); err != nil {
		return err
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := wasm.CheckBinary(data); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	body, done, err := withProgress(bytes.NewReader(data), int64(len(data)), "push "+o.name, errOut, o.progress)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var digest string
	if o.natsURL != "" {
		digest, err = pushNATS(ctx, o.natsURL, o.natsTLS, o.name, body)
	} else {
		digest, err = pushHTTP(ctx, o.api, o.name, body, int64(len(data)))
	}
	done()
	if err != nil {
		return fmt.Errorf("push %s as %s: %w", file, o.name, err)
	}
	fmt.Fprintln(out, digest)
	return nil
}

func pushNATS(ctx context.Context, natsURL string, tlsOpt nats.Option, name string, data io.Reader) (string, error) {
	nc, err := nats.Connect(natsURL, nats.Name("orca wasm push"), tlsOpt)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	ms, err := wasm.NewModuleStore(ctx, js)
	if err != nil {
		return "", err
	}
	return ms.Push(ctx, name, data)
}

// pushHTTP PUTs the module to the apiserver. The response is JSON with a
// "digest" field, or the digest as plain text; an error response is a
// Kubernetes Status whose message is reported.
func pushHTTP(ctx context.Context, api *apiClient, name string, data io.Reader, size int64) (string, error) {
	u := strings.TrimRight(api.server, "/") + WasmModulesPath + url.PathEscape(name)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, data)
	if err != nil {
		return "", err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/wasm")
	req.Header.Set("Accept", "application/json")
	resp, err := api.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("PUT %s: read response: %w", u, err)
	}
	var reply struct {
		Digest  string `json:"digest"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &reply)
	if resp.StatusCode/100 != 2 {
		msg := reply.Message
		if msg == "" {
			msg = strings.TrimSpace(string(body))
		}
		return "", fmt.Errorf("PUT %s: %s: %s", u, resp.Status, msg)
	}
	digest := reply.Digest
	if digest == "" {
		digest = strings.TrimSpace(string(body))
	}
	if !wasm.ValidDigest(digest) {
		return "", fmt.Errorf("PUT %s: response %q carries no digest", u, body)
	}
	return digest, nil
}
