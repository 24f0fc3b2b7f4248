// Command orca-agent is orca's node agent: it registers its Node, renews its
// Lease, runs the pods bound to it through its runtimes (WASM on wazero) and
// runs the node's L4 service proxy.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/nodeagent"
	clusterdns "github.com/orca-edge/orca/nodeagent/dns"
	"github.com/orca-edge/orca/nodeagent/podnet"
	"github.com/orca-edge/orca/nodeagent/proxy"
	"github.com/orca-edge/orca/runtimes"
	containerdruntime "github.com/orca-edge/orca/runtimes/containerd"
	"github.com/orca-edge/orca/runtimes/imagestore"
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
	proxySvcIf   string
	serviceCIDR  string
	metricsAddr  string
	nodePortAddr string
	proxyMaxConn int
	labels       []string
	heartbeat    time.Duration
	nodeStatus   time.Duration
	metricsRes   time.Duration
	logLevel     string
	logMaxSize   string
	logMaxFiles  int

	containerd        bool
	containerdAddress string
	privileged        bool
	volumeSync        time.Duration
	localStoragePath  string
	podNet            podNetOptions
	// cluster DNS (nodeagent/dns) and pods' resolv.conf
	clusterDomain string
	clusterDNS    []string
	dnsAddress    string
	resolvConf    string
	dnsAllow      []string
	dnsMaxConc    int
	// images: see the README's Images section
	insecureRegistries []string
	imageGCHigh        int
	imageGCLow         int
	imageGCMinAge      time.Duration
	// joining and NATS credentials: see join.go
	join       joinOptions
	natsCreds  string
	natsCAFile string
	natsURLSet bool // --nats-url given: it wins over the servers of the credentials
	profiling  profilingOptions
	// hollow nodes: see hollow.go
	hollow         int
	hollowPrefix   string
	hollowCapacity []string
	nodeNameSet    bool // --node-name given
}

// podNetOptions are the pod network's flags (nodeagent/podnet).
type podNetOptions struct {
	enabled     bool
	cidr        string
	bridge      string
	pluginDirs  []string
	masquerade  bool
	clusterCIDR string
	backend     string // --pod-network-backend
}

func (p podNetOptions) config() *podnet.Config {
	if !p.enabled {
		return nil
	}
	return &podnet.Config{PodCIDR: p.cidr, Bridge: p.bridge, PluginDirs: p.pluginDirs, DisableIPMasq: !p.masquerade, ClusterCIDR: p.clusterCIDR}
}

// dnsConfig is the cluster DNS server's configuration, nil with
// --dns-address=off.
func (o options) dnsConfig() *clusterdns.Config {
	addr := o.dnsAddress
	switch addr {
	case "off":
		return nil
	case "":
		addr = net.JoinHostPort(o.nodeIP, "53")
	}
	return &clusterdns.Config{Listen: addr, ClusterDomain: o.clusterDomain, ResolvConf: o.resolvConf,
		ClusterCIDRs: []string{o.podNet.clusterCIDR, o.podNet.cidr}, ServiceCIDRs: []string{o.serviceCIDR},
		AllowedNetworks: o.dnsAllow, MaxConcurrent: o.dnsMaxConc}
}

// routes is the route manager's config of --pod-network-backend; with
// none, the agent removes the routes and VXLAN device an earlier run
// left and manages none.
func (p podNetOptions) routes() (*podnet.RouteConfig, error) {
	if !podnet.ValidBackend(p.backend) {
		return nil, fmt.Errorf("--pod-network-backend %q: want %s, %s or %s", p.backend, podnet.BackendHostGW, podnet.BackendVXLAN, podnet.BackendNone)
	}
	return &podnet.RouteConfig{Backend: p.backend, PodCIDR: p.cidr}, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newCommand().ExecuteContext(ctx); err != nil {
		os.Exit(1)
	}
}

// newCommand returns the orca-agent command with its flags.
func newCommand() *cobra.Command {
	var o options
	host, _ := os.Hostname()
	cmd := &cobra.Command{
		Use:          "orca-agent",
		Short:        "orca node agent: runs the pods bound to this node and its service proxy",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.natsURLSet = cmd.Flags().Changed("nats-url")
			o.nodeNameSet = cmd.Flags().Changed("node-name")
			return run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.natsURL, "nats-url", "nats://127.0.0.1:4222", "URL of the cluster's NATS server")
	f.StringVar(&o.nodeName, "node-name", strings.ToLower(host), "name of this node (a DNS-1123 subdomain)")
	f.StringVar(&o.nodeIP, "node-ip", "127.0.0.1", "this node's InternalIP: pods' host ports and NodePorts listen here")
	f.StringVar(&o.dataDir, "data-dir", "/var/lib/orca/agent", "directory for pod logs, fetched modules and the compiled-code cache")
	f.BoolVar(&o.proxy, "proxy", true, "run the L4 service proxy (ClusterIPs and NodePorts)")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", defaultMetricsAddress, "host:port the agent serves Prometheus /metrics on (the proxy's orca_proxy_* per Service port), unauthenticated; \"\" or 0: off")
	f.StringVar(&o.proxySvcIf, "proxy-service-interface", proxy.ServiceInterface, "dummy interface the proxy puts ClusterIPs on (needs CAP_NET_ADMIN; \"\": none, ClusterIPs reachable only when local, as a loopback --service-cidr)")
	f.StringVar(&o.serviceCIDR, "service-cidr", "10.43.0.0/16", "the cluster's ClusterIP range (orca-server's --service-cidr): at start the proxy removes from --proxy-service-interface the addresses inside it that no Service has; \"\": any host address there")
	f.IntVar(&o.proxyMaxConn, "proxy-max-connections", 0, "most TCP connections and UDP flows the service proxy holds at once, over all Services; beyond, new connections are reset and new flows dropped (orca_proxy_errors_total{reason=\"limit\"}); 0: from the file descriptor limit (RLIMIT_NOFILE less max(n/8, 1024) for the agent, 6 per connection); -1: no cap")
	f.StringVar(&o.nodePortAddr, "nodeport-address", "", "address NodePorts listen on (default: --node-ip)")
	f.StringSliceVar(&o.labels, "node-labels", nil, "extra node labels, key=value")
	f.DurationVar(&o.heartbeat, "heartbeat-interval", 10*time.Second, "how often the node Lease is renewed and the Node's Ready condition checked; keep it well under the server's --node-monitor-grace-period (40s)")
	f.DurationVar(&o.metricsRes, "metric-resolution", 15*time.Second, "how often the agent publishes its node's and pods' CPU and memory usage for metrics.k8s.io (kubectl top), as metrics-server's --metric-resolution; at most 1m")
	f.DurationVar(&o.nodeStatus, "node-status-update-frequency", 0, "how often the agent reads its Node back to repost its status when the stored Ready condition is not True, as the kubelet's; a multiple of --heartbeat-interval (default: --heartbeat-interval; 1m with --hollow); each is one request to the apiserver")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.logMaxSize, "container-log-max-size", "10Mi", "size (a quantity: 10Mi, 500Ki) at which a container's log file is rotated, as the kubelet's; negative: never")
	f.IntVar(&o.logMaxFiles, "container-log-max-files", logfile.DefaultMaxFiles, "most log files (current and rotated) kept per container; at least 2")
	f.BoolVar(&o.containerd, "containerd", true, "run container pods (RuntimeClass runc) on containerd; false: WASM pods only")
	f.StringVar(&o.containerdAddress, "containerd-address", "", "socket of an existing containerd to use (e.g. /run/containerd/containerd.sock); default: start and supervise a private containerd under --data-dir/containerd when the containerd binary is on PATH")
	f.BoolVar(&o.privileged, "allow-privileged", false, "let containers with securityContext.privileged run (the kubelet's former flag); without it they wait with CreateContainerConfigError")
	f.StringVar(&o.localStoragePath, "default-local-storage-path", "", "directory of this node's local-path PersistentVolumes (k3s's flag; default <data-dir>/storage), published on the Node for the provisioner")
	f.DurationVar(&o.volumeSync, "volume-sync-period", 10*time.Second, "how often configMap, secret and projected volumes are re-read and updated in place, and emptyDir sizeLimits checked")
	f.BoolVar(&o.podNet.enabled, "pod-network", true, "give each container pod a network namespace on the node bridge with its own IP, and each WASM pod an IP of the same range on the node (CNI bridge, host-local, loopback); without the plugins, or off, pods are reached through host ports on the node's IP only")
	f.StringVar(&o.podNet.cidr, "pod-cidr", "", "IPv4 subnet of this node's pod IPs (default: the Node's spec.podCIDR, else "+podnet.DefaultPodCIDR+")")
	f.StringVar(&o.podNet.bridge, "pod-bridge", podnet.DefaultBridge, "name of the node bridge of the pod network")
	f.StringSliceVar(&o.podNet.pluginDirs, "cni-bin-dir", podnet.DefaultPluginDirs, "directories searched for the CNI plugins")
	f.StringVar(&o.podNet.backend, "pod-network-backend", podnet.BackendHostGW, "how pods reach pods on other nodes, as flannel's --flannel-backend: host-gw (a route per node's spec.podCIDR via its InternalIP; the nodes must share one L2 network), vxlan (VXLAN VNI 1 on UDP 8472 between InternalIPs; any routed path, 50 bytes of MTU) or none (orca's own routes removed, none managed)")
	f.BoolVar(&o.podNet.masquerade, "pod-masquerade", true, "masquerade pod traffic leaving the pod CIDR behind the node's address (the bridge plugin's ipMasq: iptables)")
	f.StringVar(&o.podNet.clusterCIDR, "cluster-cidr", "10.42.0.0/16", "the cluster's pod network (orca-server's --cluster-cidr): pod traffic to it is not masqueraded, so pods on other nodes see the pod's own address; \"\" exempts only this node's pod CIDR")
	f.StringVar(&o.clusterDomain, "cluster-domain", "cluster.local", "the cluster's DNS domain, as the kubelet's: the zone the agent's DNS server answers and container pods' search domains")
	f.StringVar(&o.dnsAddress, "dns-address", "", "host:port the agent's cluster DNS server listens on, UDP and TCP (default: --node-ip:53); \"off\": no DNS server")
	f.StringSliceVar(&o.dnsAllow, "dns-allowed-networks", nil, "further client networks (CIDRs or addresses) the DNS server answers, as CoreDNS's acl \"allow net\"; besides them only --cluster-cidr, --pod-cidr, loopback and the node's own addresses are answered, other clients get REFUSED")
	f.IntVar(&o.dnsMaxConc, "dns-max-concurrent", clusterdns.DefaultMaxConcurrent, "queries the DNS server forwards upstream at once, as CoreDNS forward's max_concurrent; more are answered REFUSED (-1: no cap)")
	f.StringSliceVar(&o.clusterDNS, "cluster-dns", nil, "nameserver IPs of container pods with dnsPolicy ClusterFirst, as the kubelet's (default: the host of --dns-address, this agent's own server, unless a loopback address: then none, and such pods get the node's resolv.conf; pods always ask on port 53)")
	f.StringVar(&o.resolvConf, "resolv-conf", "/etc/resolv.conf", "the node's resolv.conf, as the kubelet's: pods with dnsPolicy Default get its nameservers and search domains, and the DNS server forwards names outside --cluster-domain to its nameservers")
	f.StringSliceVar(&o.insecureRegistries, "insecure-registries", nil, "registry hosts (host:port, as image references name them) pulled from over plain HTTP; loopback registries always are")
	f.IntVar(&o.imageGCHigh, "image-gc-high-threshold", nodeagent.DefaultImageGCHighThresholdPercent, "percent of the image filesystem in use at which unused images are removed, as the kubelet's; 100 turns image garbage collection off")
	f.IntVar(&o.imageGCLow, "image-gc-low-threshold", nodeagent.DefaultImageGCLowThresholdPercent, "percent of the image filesystem in use that image garbage collection frees down to; 1 to 99, below the high threshold")
	f.DurationVar(&o.imageGCMinAge, "minimum-image-gc-age", nodeagent.DefaultImageMinimumGCAge, "how long an unused image is kept at least before it may be garbage collected")

	f.StringVar(&o.join.server, "server", "", "apiserver URL (https://host:6443) to join the cluster at with --token")
	f.StringVar(&o.join.token, "token", "", "bootstrap token (`orca token create`) to join with: the agent gets its node certificate and NATS credentials, kept under --data-dir for later starts")
	f.StringVar(&o.join.caHash, "discovery-token-ca-cert-hash", "", "sha256:<hex> of the cluster CA's public key (kubeadm's): the join trusts only a server whose certificate that CA signed")
	f.DurationVar(&o.join.timeout, "join-timeout", 2*time.Minute, "how long joining may take")
	f.StringVar(&o.natsCAFile, "nats-ca-file", "", "CA bundle (PEM) the NATS server's TLS certificate is verified with: orca-server's <data-dir>/tls/ca.crt (default: the one a join wrote, else the system's)")
	f.StringVar(&o.natsCreds, "nats-creds", "", "NATS .creds file of this node's user (default: the one a join wrote under --data-dir/nats, if any)")
	o.profiling.addFlags(f)
	addHollowFlags(f, &o)
	return cmd
}

func run(ctx context.Context, o options) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})))
	if _, err := o.profiling.start(ctx); err != nil {
		return err
	}
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
	// Absolute: paths under it reach containerd, runc and the CNI plugins,
	// which do not share the agent's working directory.
	if o.dataDir, err = filepath.Abs(o.dataDir); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
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
	if o.hollow != 0 {
		return runHollow(ctx, o, labels, fail)
	}
	reg := prometheus.NewRegistry()
	if _, err := startMetrics(ctx, o.metricsAddr, reg); err != nil {
		// Another agent of the host has the address: run on without.
		slog.Warn("metrics not served", "err", err)
	}
	nc, bindOnly, err := connectNATS(ctx, o, fail)
	if err != nil {
		return err
	}
	defer nc.Close()
	st, err := store.New(nc, store.Config{BindOnly: bindOnly})
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
	rts := []runtimes.Runtime{wz}
	missing := map[string]string{}
	if o.containerd {
		ctr, err := startContainerd(ctx, o, st)
		if err != nil {
			missing[nodeapi.HandlerContainerd] = err.Error()
		} else {
			defer ctr.Close(context.Background())
			rts = append(rts, ctr)
		}
	} else {
		missing[nodeapi.HandlerContainerd] = "turned off with --containerd=false"
	}
	routes, err := o.podNet.routes()
	if err != nil {
		return err
	}
	agent, err := nodeagent.New(nodeagent.Config{
		Store: st, API: nodeagent.NewRelayAPI(nc, o.nodeName), NATS: nc, NodeName: o.nodeName, NodeIP: o.nodeIP, DataDir: o.dataDir,
		ContainerLogMaxSize: logMaxSize.Value(), ContainerLogMaxFiles: o.logMaxFiles,
		Runtimes: rts, MissingRuntimes: missing, Labels: labels, Proxy: o.proxy,
		ProxyBindClusterIPs: o.proxy, NodePortAddress: o.nodePortAddr, ProxyServiceInterface: o.proxySvcIf, ProxyServiceCIDRs: nonEmpty(o.serviceCIDR), Metrics: reg,
		ProxyMaxConnections: o.proxyMaxConn, ProxyReservedAddresses: nonEmpty(metricsListen(o.metricsAddr)), HeartbeatInterval: o.heartbeat, NodeStatusUpdateFrequency: o.nodeStatus, MetricsResolution: o.metricsRes,
		AllowPrivileged: o.privileged, VolumeSyncPeriod: o.volumeSync, LocalStoragePath: o.localStoragePath, ImageGC: imageGC(o),
		PodNetwork: o.podNet.config(), Routes: routes, PodCIDRWait: 10 * time.Second,
		DNS: o.dnsConfig(), ClusterDomain: o.clusterDomain, ClusterDNS: o.clusterDNS, ResolvConf: o.resolvConf,
	})
	if err != nil {
		return err
	}
	slog.Info("orca-agent starting", "runtimes", agentHandlers(rts), "nats", nc.Servers(), "nodeIP", o.nodeIP, "dataDir", o.dataDir)
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

// startContainerd returns the containerd runtime: on the daemon at
// --containerd-address, or on a private daemon the agent starts and
// supervises under <data-dir>/containerd. Its error says why container
// pods cannot run on this node and what would enable them.
func startContainerd(ctx context.Context, o options, st *store.Store) (*containerdruntime.Runtime, error) {
	images, err := imagestore.New(ctx, st.JetStream()) // images of `orca image push`
	if err != nil {
		return nil, err
	}
	addr := o.containerdAddress
	if addr == "" {
		if _, err := exec.LookPath("containerd"); err != nil {
			return nil, errors.New("containerd is not installed (on Debian/Ubuntu: sudo apt-get install -y containerd runc), or use --containerd-address")
		}
		if os.Geteuid() != 0 {
			return nil, errors.New("a private containerd needs root: run orca-agent as root, or point --containerd-address at a running containerd")
		}
		dir, err := filepath.Abs(filepath.Join(o.dataDir, "containerd"))
		if err != nil {
			return nil, err
		}
		cfg := containerdruntime.DaemonConfig{DataDir: dir}
		if sock := filepath.Join(dir, "containerd.sock"); len(sock) > 100 {
			// A Unix socket path holds at most ~100 usable bytes: keep
			// the socket under /run instead, named after the data dir.
			sum := sha256.Sum256([]byte(dir))
			cfg.Address = filepath.Join("/run/orca", hex.EncodeToString(sum[:6]), "containerd.sock")
		}
		sup, err := containerdruntime.Supervise(ctx, cfg, slog.Default())
		if err != nil {
			return nil, err
		}
		addr = sup.Address()
		slog.Info("containerd started", "address", addr, "dataDir", sup.DataDir())
	}
	rt, err := containerdruntime.New(ctx, containerdruntime.Config{Address: addr, DataDir: filepath.Join(o.dataDir, "runc"),
		ImageSource: images, InsecureRegistries: o.insecureRegistries})
	if err != nil {
		return nil, err
	}
	return rt, nil
}

// imageGC is the image garbage collection of the flags (0 and negative
// thresholds are refused by nodeagent.New; a minimum age of 0 is none).
// connectNATS connects to NATS as node o.nodeName with the identity of
// natsIdentity (joining first when needed). A connection nats.go closes
// for good (the server closed it for a protocol error; it does not
// reconnect then) calls fail, so the process ends with an error and its
// supervisor restarts it instead of leaving it up and cut off from the
// cluster. bindOnly is natsIdentity's.
func connectNATS(ctx context.Context, o options, fail context.CancelCauseFunc) (nc *nats.Conn, bindOnly bool, err error) {
	natsOpts, natsURL, bindOnly, err := natsIdentity(ctx, o, o.natsURLSet)
	if err != nil {
		return nil, false, err
	}
	if o.natsCAFile != "" {
		if _, err := os.Stat(o.natsCAFile); err != nil {
			return nil, false, fmt.Errorf("--nats-ca-file: %w", err)
		}
		natsOpts = append(natsOpts, nats.RootCAs(o.natsCAFile))
	}
	log := slog.Default()
	if o.hollow > 0 {
		log = log.With("node", o.nodeName)
	}
	nc, err = nats.Connect(natsURL, append(natsOpts, nats.Name("orca-agent "+o.nodeName), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: we closed the connection ourselves
				log.Warn("NATS disconnected; pods keep running", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", "url", c.ConnectedUrl()) }),
		nats.ClosedHandler(func(c *nats.Conn) {
			if ctx.Err() == nil {
				err := fmt.Errorf("NATS connection of node %s closed: %v", o.nodeName, c.LastError())
				log.Error("orca-agent cannot go on without NATS; exiting", "err", err)
				fail(err)
			}
		}))...)
	if err != nil {
		return nil, false, fmt.Errorf("connect to NATS %s: %w", natsURL, err)
	}
	return nc, bindOnly, nil
}

func imageGC(o options) nodeagent.ImageGCConfig {
	c := nodeagent.ImageGCConfig{HighThresholdPercent: o.imageGCHigh, LowThresholdPercent: o.imageGCLow, MinAge: o.imageGCMinAge}
	if c.HighThresholdPercent == 0 {
		c.HighThresholdPercent = -1
	}
	if c.LowThresholdPercent == 0 {
		c.LowThresholdPercent = -1
	}
	if c.MinAge == 0 {
		c.MinAge = -1
	}
	return c
}

func agentHandlers(rts []runtimes.Runtime) []string {
	var out []string
	for _, r := range rts {
		out = append(out, r.Handler())
	}
	return out
}

// nonEmpty is []string{s}, or nil for "".
func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}
