// Package nodeagent is orca's node agent, the kubelet of an orca node: it
// registers its Node and renews its Lease, runs the pods bound to it on the
// node's runtimes (one pod worker goroutine per pod, as the kubelet's pod
// workers), probes their readiness, writes their status, serves their logs
// over NATS (controlplane/nodeapi) and runs the L4 service proxy
// (nodeagent/proxy).
//
// The agent sees only its own pods: it watches the NodePods projection with
// the subject filter "<node>.>", which the NATS server evaluates.
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/events"
	"github.com/orca-edge/orca/controlplane/store"
	clusterdns "github.com/orca-edge/orca/nodeagent/dns"
	"github.com/orca-edge/orca/nodeagent/podnet"
	"github.com/orca-edge/orca/nodeagent/proxy"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/logfile"
)

// KubeletVersion is reported in the Node's status.nodeInfo.kubeletVersion.
const KubeletVersion = "v1.32.0-orca"

// Config configures an Agent. Store, NATS and NodeName are required.
type Config struct {
	// Store is read only: the agent's NodePods projection and its
	// informers (RuntimeClasses, the proxy's Services and Endpoints).
	Store *store.Store
	// API serves every other read and all writes (Secrets, ConfigMaps,
	// the Node, its Lease, pod status and deletion, Events, tokens).
	// orca-agent passes the relay, which the apiserver authorizes as
	// this node. Default: NewStoreAPI(Store), trusted direct access.
	API API
	// NATS serves the log protocol (controlplane/nodeapi).
	NATS *nats.Conn
	// NodeName names the Node object; main defaults it to the hostname.
	NodeName string
	// NodeIP is the node's InternalIP, which is also every pod's IP.
	// Default "127.0.0.1".
	NodeIP string
	// DataDir holds container logs under
	// <DataDir>/pods/<ns>_<name>_<uid>/<container>/<attempt>.log and pod
	// volumes under <DataDir>/volumes/<uid>/<kind>/<volume>.
	// Default: a directory "orca-agent-<node>" under os.TempDir.
	DataDir string
	// ContainerLogMaxSize is the size in bytes at which a container's log
	// file is rotated, and ContainerLogMaxFiles the most files (current
	// and rotated) kept per container attempt, as the kubelet's
	// containerLogMaxSize and containerLogMaxFiles. Defaults 10 MiB and 5;
	// a negative size turns rotation off; MaxFiles must not be 1. They
	// reach the runtimes in the context tasks are started with
	// (runtimes/logfile.WithRotation).
	ContainerLogMaxSize  int64
	ContainerLogMaxFiles int
	// Runtimes, by their Handler() ("wasm", "runc"). At least one.
	Runtimes []runtimes.Runtime
	// MissingRuntimes names the handlers this node could not start, with
	// why ("runc": "containerd is not installed ..."). The node does not
	// advertise them (pods of those handlers are not scheduled here), its
	// Node reports condition ContainerRuntimeUnhealthy=True with the
	// reasons, and a Warning Event says so once at start.
	MissingRuntimes map[string]string
	// Capacity of the node; missing entries default to runtime.NumCPU cpus,
	// MemTotal of /proc/meminfo and 110 pods.
	Capacity corev1.ResourceList
	// Labels are extra Node labels.
	Labels map[string]string
	// MetricsResolution is how often the agent publishes its node's and
	// pods' usage for metrics.k8s.io (kubectl top), as metrics-server's
	// --metric-resolution. Default DefaultMetricsResolution (15s); at
	// most nodeapi.MetricsTTL/2.
	MetricsResolution time.Duration
	// HeartbeatInterval is the Lease renew period. Default 10s.
	HeartbeatInterval time.Duration
	// StatusInterval is the Node status (Ready heartbeat) refresh period
	// of an unchanged node, as the kubelet's nodeStatusReportFrequency
	// (the Lease is the heartbeat; the node lifecycle controller reads
	// both). Default 5m, the kubelet's.
	StatusInterval time.Duration
	// NodeStatusUpdateFrequency is how often the agent reads its Node
	// back to repost its status when the stored Ready condition is not
	// True, as the kubelet's nodeStatusUpdateFrequency; rounded up to a
	// multiple of HeartbeatInterval. Default HeartbeatInterval. Each
	// check is one request to the apiserver: a longer period lightens
	// the control plane of large fleets (and of hollow nodes), and a node
	// marked Unknown while its Lease was renewed is repaired later.
	NodeStatusUpdateFrequency time.Duration
	// Proxy runs the service proxy.
	Proxy bool
	// ProxyBindClusterIPs makes the proxy listen on Services' ClusterIPs.
	ProxyBindClusterIPs bool
	// Metrics, when set, gets the agent's Prometheus metrics (the
	// proxy's orca_proxy_*).
	Metrics prometheus.Registerer
	// ProxyServiceInterface is the dummy interface the proxy puts
	// ClusterIPs on (proxy.Config.ServiceInterface); "": none.
	ProxyServiceInterface string
	// ProxyServiceCIDRs are the ClusterIP ranges (proxy.Config.ServiceCIDRs):
	// stale addresses are removed from the service interface only inside
	// them. Empty: any host address on it.
	ProxyServiceCIDRs []string
	// NodePortAddress is the address NodePorts listen on. Default NodeIP.
	NodePortAddress string
	// ProxyMaxConnections caps the proxy's concurrent connections and UDP
	// flows (proxy.Config.MaxConnections; 0: from RLIMIT_NOFILE).
	ProxyMaxConnections int
	// ProxyReservedAddresses are addresses the agent listens on besides
	// its DNS server (its metrics, say), which Service endpoints may not
	// point the proxy at (proxy.Config.ReservedAddresses; DNS.Listen is
	// added).
	ProxyReservedAddresses []string
	// PodNetwork is the pod network (nodeagent/podnet): each pod of the
	// runc handler outside the node's network gets one network
	// namespace, shared by its containers, on the node bridge with its
	// own IP in status.podIP; each WASM pod outside the node's network
	// gets an IP of the same range on the node (podnet.SetupAddress), on
	// which its containerPorts listen. StateDir defaults to
	// <DataDir>/podnet; PodCIDR to the Node's spec.podCIDR, else
	// podnet.DefaultPodCIDR. Nil, or the CNI plugins missing (said in
	// the log and a Node event): no pod network, each container runs in
	// a namespace of its own, reached through its host ports, a WASM
	// pod's ports listen on NodeIP (at hostPort, else a free port, in
	// the orca.dev/host-ports annotation), and the pod's IP is the
	// node's.
	PodNetwork *podnet.Config
	// DNS, when set, runs the cluster DNS server (nodeagent/dns) in the
	// agent with it; its Store defaults to Store and its ClusterDomain
	// to ClusterDomain. A server that cannot bind is logged; the agent
	// runs on without it. Nil: no DNS server.
	DNS *clusterdns.Config
	// ClusterDomain is the cluster's DNS domain, the kubelet's
	// --cluster-domain: container pods' search domains under dnsPolicy
	// ClusterFirst. Default "cluster.local".
	ClusterDomain string
	// ClusterDNS are the nameserver IPs of container pods under dnsPolicy
	// ClusterFirst, the kubelet's --cluster-dns. Default: the host of
	// DNS.Listen when DNS is set and it is neither a loopback nor the
	// unspecified address (which a pod's network namespace cannot reach).
	// Empty: ClusterFirst pods get the node's resolv.conf, as the kubelet
	// without clusterDNS.
	ClusterDNS []string
	// ResolvConf is the node's resolv.conf, the kubelet's --resolv-conf:
	// the nameservers and search domains of dnsPolicy Default (and of
	// ClusterFirst's host search domains). Default "/etc/resolv.conf";
	// missing: none.
	ResolvConf string
	// Routes routes the other nodes' pod CIDRs to them
	// (podnet.Routes: host-gw or vxlan, orca-agent's
	// --pod-network-backend); NodeName, NodeIP (default Config's),
	// PodCIDR (default PodNetwork's) and PublishVTEPMAC (the agent's
	// Node annotation, through API) are filled in. Nil: no routes.
	Routes *podnet.RouteConfig
	// PodCIDRWait is how long Run waits, polling every 200ms, for the
	// control plane's node IPAM to set the Node's spec.podCIDR when
	// PodNetwork.PodCIDR is "" and the Node has none yet (the kubelet
	// likewise waits for its podCIDR before its network is ready); after
	// it the pod network starts on podnet.DefaultPodCIDR with a warning.
	// Default 0: no wait. orca-agent waits 10s.
	PodCIDRWait time.Duration
	// BackoffBase is the first crash-loop back-off; it doubles up to
	// BackoffMax. Defaults 10s and 5m, as the kubelet's.
	BackoffBase, BackoffMax time.Duration
	// AllowPrivileged lets containers with securityContext.privileged run
	// (the kubelet's former --allow-privileged). Default false: such a
	// container waits with CreateContainerConfigError and an Event.
	AllowPrivileged bool
	// NoMounts makes the agent mount nothing: secret, projected and
	// medium: Memory emptyDir volumes are directories on disk and
	// subPaths are not bind-mounted, as kubemark's fake mounter. For
	// hollow nodes (nodeagent/hollow), whose runtimes run no process:
	// thousands of nodes of one process would otherwise mount a tmpfs
	// per Secret volume of every pod (and leave them mounted after a
	// stop). Default false.
	NoMounts bool
	// VolumeSyncPeriod is how often configMap, secret and projected
	// volumes are re-read from the store and updated in place, and
	// emptyDir sizeLimits checked. Default 10s.
	VolumeSyncPeriod time.Duration
	// LocalStoragePath is the directory local-path PersistentVolumes of
	// this node live under (k3s's --default-local-storage-path), published
	// on the Node (annotation nodeapi.AnnLocalStoragePath) for the
	// provisioner. Default <DataDir>/storage.
	LocalStoragePath string
	// MaxStreams bounds the exec, attach and port-forward streams (one
	// per forwarded connection) served at once; one more is refused with
	// 429. Default DefaultMaxStreams (64).
	MaxStreams int
	// ImageGC configures the garbage collection of unused images
	// (imagegc.go; the kubelet's thresholds, defaults 85% and 80%).
	ImageGC ImageGCConfig
	// Services, when set, is a Services informer shared with other agents
	// of this process (hollow nodes) that its caller runs; nil: the agent
	// runs its own over Store. It gives pods their Service environment
	// variables (serviceenv.go) and feeds the DNS server.
	Services *store.Informer
	// RuntimeClasses, when set, is a RuntimeClasses informer shared with
	// other agents of this process (hollow nodes): its caller runs it
	// and it must outlive the agent (the agent's handler stays
	// registered). Every node may read every RuntimeClass, so sharing
	// it widens no node's reads. Nil: the agent runs its own over Store.
	RuntimeClasses *store.Informer
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// DefaultStatusInterval is Config.StatusInterval's default: 5 minutes,
// the kubelet's nodeStatusReportFrequency.
const DefaultStatusInterval = 5 * time.Minute

// Agent is a running node agent. Create it with New.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	api      API
	runtimes map[string]runtimes.Runtime

	nodePods *store.Informer
	rcs      *store.Informer
	services *store.Informer // Services, for pods' environment and the DNS server
	proxy    *proxy.Proxy
	dns      *clusterdns.Server
	routes   *podnet.Routes // nil: Config.Routes unset

	pods     *podManager
	podnet   *podnet.Network // nil: no pod network; set by Run before the pod workers start
	logs     *liveLogs
	recorder *events.Recorder
	tokens   *tokenManager // projected ServiceAccount tokens

	readyOnce sync.Once
	ready     chan struct{}

	// lease is the Lease as last written; only heartbeatLoop uses it.
	lease *coordinationv1.Lease

	healthMu sync.Mutex
	// unhealthy holds what failed the last runtime health check, by
	// handler; healthMu must be held.
	unhealthy map[string]string
}

// New validates cfg, applies defaults and returns an Agent. It fails when
// Store, NATS, NodeName or Runtimes are missing or two runtimes share a
// handler.
func New(cfg Config) (*Agent, error) {
	if cfg.Store == nil {
		return nil, errors.New("nodeagent: Config.Store is required")
	}
	if cfg.NATS == nil {
		return nil, errors.New("nodeagent: Config.NATS is required")
	}
	if cfg.NodeName == "" {
		return nil, errors.New("nodeagent: Config.NodeName is required")
	}
	if len(cfg.Runtimes) == 0 {
		return nil, fmt.Errorf("nodeagent: node %s: at least one runtime is required", cfg.NodeName)
	}
	if err := (logfile.Rotation{MaxSize: cfg.ContainerLogMaxSize, MaxFiles: cfg.ContainerLogMaxFiles}).Validate(); err != nil {
		return nil, fmt.Errorf("nodeagent: node %s: %w", cfg.NodeName, err)
	}
	if cfg.NodeIP == "" {
		cfg.NodeIP = "127.0.0.1"
	}
	if cfg.DataDir == "" {
		cfg.DataDir = os.TempDir() + "/orca-agent-" + cfg.NodeName
	}
	// Paths under DataDir reach containerd, runc and the CNI plugins.
	if dir, err := filepath.Abs(cfg.DataDir); err == nil {
		cfg.DataDir = dir
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 10 * time.Second
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = DefaultStatusInterval
	}
	if cfg.NodeStatusUpdateFrequency <= 0 {
		cfg.NodeStatusUpdateFrequency = cfg.HeartbeatInterval
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = clusterdns.DefaultClusterDomain
	}
	if len(cfg.ClusterDNS) == 0 && cfg.DNS != nil {
		cfg.ClusterDNS = defaultClusterDNS(cfg.DNS.Listen)
	}
	if cfg.ResolvConf == "" {
		cfg.ResolvConf = "/etc/resolv.conf"
	}
	if cfg.NodePortAddress == "" {
		cfg.NodePortAddress = cfg.NodeIP
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = 10 * time.Second
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 5 * time.Minute
	}
	if cfg.VolumeSyncPeriod <= 0 {
		cfg.VolumeSyncPeriod = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	gc, err := cfg.ImageGC.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("nodeagent: node %s: %w", cfg.NodeName, err)
	}
	cfg.ImageGC = gc
	if pn := cfg.PodNetwork; pn != nil && pn.PodCIDR != "" {
		if _, err := podnet.ParsePodCIDR(pn.PodCIDR); err != nil {
			return nil, fmt.Errorf("nodeagent: node %s: %w", cfg.NodeName, err)
		}
	}
	if cfg.API == nil {
		cfg.API = NewStoreAPI(cfg.Store)
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("node", cfg.NodeName), api: cfg.API, runtimes: map[string]runtimes.Runtime{}, ready: make(chan struct{})}
	for _, r := range cfg.Runtimes {
		if _, dup := a.runtimes[r.Handler()]; dup {
			return nil, fmt.Errorf("nodeagent: node %s: two runtimes serve handler %q", cfg.NodeName, r.Handler())
		}
		a.runtimes[r.Handler()] = r
	}
	a.nodePods = store.NewInformer(cfg.Store, store.NodePods, store.WithFilter(store.EncodeName(cfg.NodeName)+".>"))
	a.rcs = cfg.RuntimeClasses
	if a.rcs == nil {
		a.rcs = store.NewInformer(cfg.Store, store.RuntimeClasses)
	}
	a.services = cfg.Services
	if a.services == nil {
		a.services = store.NewInformer(cfg.Store, store.Services)
	}
	a.logs = newLiveLogs()
	a.recorder = events.NewWithSink(eventSink{cfg.API}, "kubelet", cfg.NodeName)
	a.tokens = newTokenManager(cfg.API.CreateToken)
	a.pods = newPodManager(a)
	if cfg.Proxy {
		reserved := append([]string(nil), cfg.ProxyReservedAddresses...)
		if cfg.DNS != nil && cfg.DNS.Listen != "" {
			reserved = append(reserved, cfg.DNS.Listen)
		}
		// Loopback endpoints are real only where the node's IP is loopback
		// (single-host clusters): its host ports and hostNetwork pods are
		// published there.
		nip := net.ParseIP(cfg.NodeIP)
		p, err := proxy.New(proxy.Config{Store: cfg.Store, BindClusterIPs: cfg.ProxyBindClusterIPs, NodePortAddress: cfg.NodePortAddress, NodeName: cfg.NodeName, ServiceInterface: cfg.ProxyServiceInterface, ServiceCIDRs: cfg.ProxyServiceCIDRs, Metrics: cfg.Metrics, Logger: a.log,
			LoopbackEndpoints: nip == nil || nip.IsLoopback(), ReservedAddresses: reserved, MaxConnections: cfg.ProxyMaxConnections})
		if err != nil {
			return nil, fmt.Errorf("nodeagent: node %s: %w", cfg.NodeName, err)
		}
		a.proxy = p
	}
	if cfg.DNS != nil {
		dc := *cfg.DNS
		if dc.Store == nil {
			dc.Store = cfg.Store
		}
		if dc.Services == nil {
			dc.Services = a.services
		}
		if dc.ClusterDomain == "" {
			dc.ClusterDomain = cfg.ClusterDomain
		}
		if dc.Logger == nil {
			dc.Logger = a.log
		}
		if pn := cfg.PodNetwork; pn != nil {
			// The pods' addresses are the DNS server's clients.
			dc.ClusterCIDRs = append(append([]string(nil), dc.ClusterCIDRs...), pn.ClusterCIDR, pn.PodCIDR)
		}
		d, err := clusterdns.New(dc)
		if err != nil {
			return nil, fmt.Errorf("nodeagent: node %s: %w", cfg.NodeName, err)
		}
		a.dns = d
	}
	if a.routes, err = a.newRoutes(); err != nil {
		return nil, fmt.Errorf("nodeagent: node %s: %w", cfg.NodeName, err)
	}
	return a, nil
}

// DNS returns the agent's cluster DNS server, or nil when Config.DNS is
// nil.
func (a *Agent) DNS() *clusterdns.Server { return a.dns }

// Proxy returns the agent's service proxy, or nil when Config.Proxy is off.
func (a *Agent) Proxy() *proxy.Proxy { return a.proxy }

// Ready is closed once the agent has registered its Node, synced its
// informers and started serving logs.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Run registers the node and runs until ctx ends. On the end of ctx it stops
// the proxy and the log server but leaves the pods' desired state alone
// (in-process WASM tasks end with the process). It returns an error only
// when the agent could not start (node registration or log subscription).
func (a *Agent) Run(ctx context.Context) error {
	if err := os.MkdirAll(a.podsDir(), 0o755); err != nil {
		return fmt.Errorf("nodeagent: node %s: data dir: %w", a.cfg.NodeName, err)
	}
	// Pods' volumes hold their Secrets and ServiceAccount tokens: only
	// root may traverse to them (the kubelet keeps its pods directory
	// 0750 root:root). Containers see their bind-mounted volumes, WASM
	// pods their preopens, without traversing this directory.
	if err := os.MkdirAll(a.volumesDir(), 0o700); err != nil {
		return fmt.Errorf("nodeagent: node %s: volumes dir: %w", a.cfg.NodeName, err)
	}
	if err := os.Chmod(a.volumesDir(), 0o700); err != nil { // made by an older agent
		return fmt.Errorf("nodeagent: node %s: volumes dir: %w", a.cfg.NodeName, err)
	}
	a.checkRuntimes(ctx)
	if err := a.registerNode(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before the node could register
		}
		return err
	}
	if err := a.startPodNetwork(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(logfile.WithRotation(ctx, logfile.Rotation{MaxSize: a.cfg.ContainerLogMaxSize, MaxFiles: a.cfg.ContainerLogMaxFiles}))
	defer cancel()
	var wg sync.WaitGroup
	goRun := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	goRun(func() { a.recorder.Run(ctx) })
	a.reportMissingRuntimes(ctx)
	goRun(func() { a.heartbeatLoop(ctx) })
	if a.proxy != nil {
		goRun(func() {
			if err := a.proxy.Run(ctx); err != nil && ctx.Err() == nil {
				a.log.Error("service proxy stopped", "err", err)
			}
		})
	}

	if a.dns != nil {
		goRun(func() {
			if err := a.dns.Run(ctx); err != nil {
				a.log.Error("cluster DNS server not running", "err", err)
			}
		})
	}

	if a.routes != nil {
		a.runRoutes(ctx, goRun)
	}
	if a.cfg.RuntimeClasses == nil {
		goRun(func() { a.rcs.Run(ctx) })
	}
	if a.cfg.Services == nil {
		goRun(func() { a.services.Run(ctx) })
	}
	// Containers start once the Services are known, for their
	// environment, as the kubelet's serviceHasSynced.
	if !a.rcs.WaitForSync(ctx) || !a.services.WaitForSync(ctx) {
		wg.Wait()
		return nil
	}
	adopted := a.recoverTasks(ctx)
	a.pods.mu.Lock()
	a.pods.ctx, a.pods.adopted = ctx, adopted
	a.pods.mu.Unlock()
	a.rcs.AddHandler(store.Handler{
		OnAdd:    func(store.Object) { a.pods.notifyAll() },
		OnUpdate: func(_, _ store.Object) { a.pods.notifyAll() },
	})
	a.nodePods.AddHandler(a.pods.handler())
	goRun(func() { a.nodePods.Run(ctx) })
	if !a.nodePods.WaitForSync(ctx) {
		wg.Wait()
		return nil
	}
	a.pods.stopOrphans(ctx)
	goRun(func() { a.imageGCLoop(ctx) })
	goRun(func() { a.metricsLoop(ctx) })
	a.gcSandboxes(ctx)
	a.removeOrphanLogs()
	a.removeOrphanVolumes()

	sub, err := a.serveNodeAPI(ctx)
	if err != nil {
		cancel()
		a.pods.wait()
		wg.Wait()
		return fmt.Errorf("nodeagent: node %s: serve logs and streams: %w", a.cfg.NodeName, err)
	}
	a.readyOnce.Do(func() { close(a.ready) })
	a.log.Info("node agent running", "ip", a.cfg.NodeIP, "runtimes", a.handlers())
	<-ctx.Done()
	sub.Unsubscribe()
	a.pods.wait()
	wg.Wait()
	return nil
}

// handlers returns the runtime handlers in Config order.
func (a *Agent) handlers() []string {
	var out []string
	for _, r := range a.cfg.Runtimes {
		out = append(out, r.Handler())
	}
	return out
}

func (a *Agent) podsDir() string { return a.cfg.DataDir + "/pods" }

// capacity returns the node's capacity with defaults filled in.
func (a *Agent) capacity() corev1.ResourceList {
	out := corev1.ResourceList{}
	for k, v := range a.cfg.Capacity {
		out[k] = v.DeepCopy()
	}
	if _, ok := out[corev1.ResourceCPU]; !ok {
		out[corev1.ResourceCPU] = *resourceQuantity(int64(runtime.NumCPU()), "")
	}
	if _, ok := out[corev1.ResourceMemory]; !ok {
		if m := memTotal(); m > 0 {
			out[corev1.ResourceMemory] = *resourceQuantity(m, "Bi")
		}
	}
	if _, ok := out[corev1.ResourcePods]; !ok {
		out[corev1.ResourcePods] = *resourceQuantity(110, "")
	}
	return out
}
