// Command orca-agent is orca's node agent: it registers its Node, renews its
// Lease, runs the pods bound to it through its runtimes (WASM on wazero) and
// runs the node's L4 service proxy.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/nodeagent"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/logfile"
	wazeroruntime "github.com/orca-edge/orca/runtimes/wazero"
	"github.com/orca-edge/orca/wasm"
)

type options struct {
	natsURL      string
	nodeName     string
	nodeIP       string
	dataDir      string
	proxy        bool
	nodePortAddr string
	labels       []string
	heartbeat    time.Duration
	logLevel     string
	logMaxSize   string
	logMaxFiles  int
}

func main() {
	var o options
	host, _ := os.Hostname()
	cmd := &cobra.Command{
		Use:          "orca-agent",
		Short:        "orca node agent: runs the pods bound to this node and its service proxy",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.natsURL, "nats-url", "nats://127.0.0.1:4222", "URL of the cluster's NATS server")
	f.StringVar(&o.nodeName, "node-name", strings.ToLower(host), "name of this node (a DNS-1123 subdomain)")
	f.StringVar(&o.nodeIP, "node-ip", "127.0.0.1", "this node's InternalIP: pods' host ports and NodePorts listen here")
	f.StringVar(&o.dataDir, "data-dir", "/var/lib/orca/agent", "directory for pod logs, fetched modules and the compiled-code cache")
	f.BoolVar(&o.proxy, "proxy", true, "run the L4 service proxy (ClusterIPs and NodePorts)")
	f.StringVar(&o.nodePortAddr, "nodeport-address", "", "address NodePorts listen on (default: --node-ip)")
	f.StringSliceVar(&o.labels, "node-labels", nil, "extra node labels, key=value")
	f.DurationVar(&o.heartbeat, "heartbeat-interval", 10*time.Second, "how often the node Lease is renewed and the Node's Ready condition checked; keep it well under the server's --node-monitor-grace-period (40s)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.logMaxSize, "container-log-max-size", "10Mi", "size (a quantity: 10Mi, 500Ki) at which a container's log file is rotated, as the kubelet's; negative: never")
	f.IntVar(&o.logMaxFiles, "container-log-max-files", logfile.DefaultMaxFiles, "most log files (current and rotated) kept per container; at least 2")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd.ExecuteContext(ctx); err != nil {
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})))
	labels := map[string]string{}
	for _, kv := range o.labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--node-labels %q: want key=value", kv)
		}
		labels[k] = v
	}
	logMaxSize, err := resource.ParseQuantity(o.logMaxSize)
	if err != nil {
		return fmt.Errorf("--container-log-max-size %q: %w", o.logMaxSize, err)
	}
	if logMaxSize.IsZero() {
		return fmt.Errorf("--container-log-max-size %q: must not be 0 (a negative size turns rotation off)", o.logMaxSize)
	}
	if o.logMaxFiles < 2 {
		return fmt.Errorf("--container-log-max-files %d: must be at least 2, as the kubelet's", o.logMaxFiles)
	}
	if err := os.MkdirAll(o.dataDir, 0o755); err != nil {
		return err
	}
	// A connection nats.go closes for good (the server closed it for a
	// protocol error; it does not reconnect then) ends the process with
	// an error, so its supervisor restarts it instead of leaving it up
	// and cut off from the cluster.
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	nc, err := nats.Connect(o.natsURL, nats.Name("orca-agent "+o.nodeName), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: we closed the connection ourselves
				slog.Warn("NATS disconnected; pods keep running", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { slog.Info("NATS reconnected", "url", c.ConnectedUrl()) }),
		nats.ClosedHandler(func(c *nats.Conn) {
			if ctx.Err() == nil {
				err := fmt.Errorf("NATS connection closed: %v", c.LastError())
				slog.Error("orca-agent cannot go on without NATS; exiting", "err", err)
				fail(err)
			}
		}))
	if err != nil {
		return fmt.Errorf("connect to NATS %s: %w", o.natsURL, err)
	}
	defer nc.Close()
	st, err := store.New(nc, store.Config{})
	if err != nil {
		return err
	}
	defer st.Close()
	modules, err := wasm.NewModuleStore(ctx, st.JetStream())
	if err != nil {
		return err
	}
	wz, err := wazeroruntime.New(ctx, wazeroruntime.Config{DataDir: filepath.Join(o.dataDir, "wasm"), Modules: modules})
	if err != nil {
		return err
	}
	defer wz.Close(context.Background())
	agent, err := nodeagent.New(nodeagent.Config{
		Store: st, NATS: nc, NodeName: o.nodeName, NodeIP: o.nodeIP, DataDir: o.dataDir,
		ContainerLogMaxSize: logMaxSize.Value(), ContainerLogMaxFiles: o.logMaxFiles,
		Runtimes: []runtimes.Runtime{wz}, Labels: labels, Proxy: o.proxy,
		ProxyBindClusterIPs: o.proxy, NodePortAddress: o.nodePortAddr, HeartbeatInterval: o.heartbeat,
	})
	if err != nil {
		return err
	}
	slog.Info("orca-agent starting", "nats", o.natsURL, "nodeIP", o.nodeIP, "dataDir", o.dataDir)
	err = agent.Run(ctx)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	slog.Info("orca-agent stopped", "node", o.nodeName)
	return err
}
