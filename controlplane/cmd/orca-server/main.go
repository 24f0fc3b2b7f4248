// Command orca-server runs orca's control plane in one process: an embedded
// NATS server with JetStream (or a connection to an external one), the REST
// apiserver, the scheduler and the controllers. Each role can be switched
// off by flag, so a fleet can run them in separate processes.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/orca-edge/orca/controlplane/apiserver"
	"github.com/orca-edge/orca/controlplane/controllers"
	"github.com/orca-edge/orca/controlplane/controllers/csr"
	"github.com/orca-edge/orca/controlplane/controllers/nodeipam"
	"github.com/orca-edge/orca/controlplane/registry/apiextensions"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/registry/storage"
	"github.com/orca-edge/orca/controlplane/scheduler"
	"github.com/orca-edge/orca/controlplane/security"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/runtimes/imagestore"
	"github.com/orca-edge/orca/wasm"
)

type options struct {
	dataDir     string
	natsURL     string
	natsListen  string
	syncAlways  bool
	groupCommit bool
	apiAddr     string
	serviceCIDR string
	// advertiseAddress is kube-apiserver's --advertise-address: the
	// address the kubernetes Service's endpoints name.
	advertiseAddress string
	// clusterCIDR, nodeCIDRMaskSize and allocateNodeCIDRs are
	// kube-controller-manager's (k3s's defaults): the node IPAM controller.
	clusterCIDR       string
	nodeCIDRMaskSize  int
	allocateNodeCIDRs bool
	// disableServiceLB is k3s's --disable servicelb.
	disableServiceLB        bool
	resourceQuotaSyncPeriod time.Duration
	// defaultLocalStoragePath and disableLocalStorage are k3s's
	// --default-local-storage-path and --disable local-storage.
	defaultLocalStoragePath string
	disableLocalStorage     bool
	apiserver               bool
	scheduler               bool
	// disableScheduler is k3s's --disable-scheduler: the server runs
	// without its scheduler (pods stay Pending), whatever --scheduler says.
	disableScheduler bool
	controllers      bool
	nodeGrace        time.Duration
	eventTTL         time.Duration
	replicas         int
	logLevel         string

	maxInflight         int
	maxMutatingInflight int
	requestTimeout      time.Duration
	maxConnections      int

	nats           natsAuthOptions
	encryption     encryptionOptions
	sec            security.Options
	insecureAddr   string
	kubeconfig     string
	kubeconfigMode string
	admission      admissionOptions
	natsTLS        bool
	natsCAFile     string
	audit          auditOptions

	clusterSigningDuration time.Duration
	profiling              bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newCommand().ExecuteContext(ctx); err != nil {
		os.Exit(1)
	}
}

// newCommand returns orca-server's command with its flags.
func newCommand() *cobra.Command {
	var o options
	cmd := &cobra.Command{
		Use:   "orca-server",
		Short: "orca control plane: embedded NATS, REST apiserver, scheduler and controllers",
		Long: `orca-server runs orca's control plane.

By default it starts an embedded NATS server with JetStream, storing cluster
state under --data-dir and fsyncing every write. With --nats-url it uses an
external NATS cluster instead. The apiserver speaks the Kubernetes REST API on
--apiserver-addr, so kubectl works against it.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", "/var/lib/orca/server", "directory for the embedded NATS server's JetStream files")
	f.StringVar(&o.natsURL, "nats-url", "", "URL of an external NATS server (disables the embedded one)")
	f.StringVar(&o.natsListen, "nats-listen", "127.0.0.1:4222", "host:port the embedded NATS server listens on (agents connect here)")
	f.BoolVar(&o.syncAlways, "nats-sync-always", true, "embedded NATS: fsync every write before acknowledging it (etcd's durability)")
	f.BoolVar(&o.groupCommit, "nats-group-commit", true, "embedded NATS with --nats-sync-always: the store fsyncs, one fsync for the writes waiting together (group commit); false: the NATS server fsyncs each write in turn (JetStream's sync_always)")
	f.StringVar(&o.apiAddr, "apiserver-addr", "127.0.0.1:6443", "address the REST apiserver listens on")
	f.StringVar(&o.serviceCIDR, "service-cidr", apiserver.DefaultServiceCIDR, "IPv4 range Service ClusterIPs are allocated from; its first address is the kubernetes Service's (the agents serve ClusterIPs on a local dummy interface)")
	f.StringVar(&o.advertiseAddress, "advertise-address", "", "IP address the kubernetes Service in default points at (default: the host of --apiserver-addr, or the default-route interface's address when it listens on all)")
	f.StringVar(&o.clusterCIDR, "cluster-cidr", nodeipam.DefaultClusterCIDR, "IPv4 range of pod IPs: each Node gets a subnet of it in spec.podCIDR (with --allocate-node-cidrs)")
	f.IntVar(&o.nodeCIDRMaskSize, "node-cidr-mask-size", nodeipam.DefaultNodeCIDRMaskSize, "prefix length of each Node's subnet of --cluster-cidr (24: 254 pods per node, 256 nodes in a /16)")
	f.BoolVar(&o.allocateNodeCIDRs, "allocate-node-cidrs", true, "give every Node without spec.podCIDR a subnet of --cluster-cidr (the controllers' node IPAM)")
	f.StringVar(&o.defaultLocalStoragePath, "default-local-storage-path", "", "directory of local-path volumes on every node (k3s's flag); empty: each node's own, <agent data-dir>/storage unless the agent's --default-local-storage-path says otherwise")
	f.BoolVar(&o.disableLocalStorage, "disable-local-storage", false, "do not create the default local-path StorageClass (k3s's --disable local-storage)")
	f.DurationVar(&o.resourceQuotaSyncPeriod, "resource-quota-sync-period", 5*time.Minute, "how often every ResourceQuota's usage is recalculated whatever changed (kube-controller-manager's flag); object changes recalculate it at once")
	f.BoolVar(&o.disableServiceLB, "disable-servicelb", false, "do not set LoadBalancer Services' ingress to the Ready nodes' addresses (k3s's --disable servicelb): leave them to another load balancer")
	f.BoolVar(&o.apiserver, "apiserver", true, "run the REST apiserver")
	f.BoolVar(&o.scheduler, "scheduler", true, "run the scheduler")
	f.BoolVar(&o.disableScheduler, "disable-scheduler", false, "do not run the scheduler: pods stay Pending until a scheduler runs (k3s's flag; the same as --scheduler=false)")
	f.BoolVar(&o.controllers, "controllers", true, "run the controllers")
	f.DurationVar(&o.nodeGrace, "node-monitor-grace-period", 40*time.Second, "a node is Ready=Unknown when its Lease was not renewed for this long")
	f.DurationVar(&o.eventTTL, "event-ttl", time.Hour, "how long Events are kept after they were last seen")
	f.IntVar(&o.replicas, "replicas", 1, "stream replicas per KV bucket (3 on an external NATS cluster)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.IntVar(&o.maxInflight, "max-requests-inflight", 400, "read-only API requests served at once; more get 429 (watches and logs are not counted)")
	f.IntVar(&o.maxMutatingInflight, "max-mutating-requests-inflight", 200, "mutating API requests served at once; more get 429")
	f.DurationVar(&o.requestTimeout, "request-timeout", time.Minute, "time an API request (body included) may take, watches and logs excepted")
	f.IntVar(&o.maxConnections, "max-connections", 4096, "HTTP connections the apiserver holds at once; more wait to be accepted")
	// Off by default, unlike kube-apiserver's (true): the CIS Kubernetes
	// Benchmark asks for --profiling=false, and an edge control plane is
	// often reachable from networks its admins do not control.
	f.BoolVar(&o.profiling, "profiling", false, "serve Go's profiles under /debug/pprof on the apiserver, to users allowed the non-resource URLs /debug/pprof and /debug/pprof/* (by default system:masters and cluster-admin)")
	addNATSAuthFlags(f, &o.nats)
	o.encryption.addFlags(f)
	addSecurityFlags(f, &o)
	addServiceAccountFlags(f, &o)
	cmd.AddCommand(newNATSConfigCommand())
	o.admission.addFlags(f)
	cmd.AddCommand(newIssueCertificateCommand())
	o.audit.addFlags(f)
	return cmd
}

func run(ctx context.Context, o options) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})))
	transformers, err := o.encryption.transformers(ctx, o.dataDir)
	if err != nil {
		return err
	}
	podSecurity, err := o.admission.podSecurity()
	if err != nil {
		return err
	}

	natsAuth, err := natsAuthority(o)
	if err != nil {
		return err
	}
	sec, err := loadSecurity(o)
	if err != nil {
		return err
	}
	url := o.natsURL
	var groupCommit *store.GroupCommit // the embedded server's, with --nats-group-commit
	var embedded nats.InProcessConnProvider
	connectURL := "" // url, or for the embedded server a nats:// twin; set below
	if url == "" {
		host, portStr, err := net.SplitHostPort(o.natsListen)
		if err != nil {
			return fmt.Errorf("--nats-listen %q: %w", o.natsListen, err)
		}
		var port int
		if _, err := fmt.Sscan(portStr, &port); err != nil {
			return fmt.Errorf("--nats-listen %q: bad port", o.natsListen)
		}
		if err := checkFree(o.natsListen); err != nil {
			return err
		}
		ecfg := store.EmbeddedConfig{Host: host, Port: port, DataDir: filepath.Join(o.dataDir, "jetstream"), SyncAlways: o.syncAlways,
			GroupCommit: o.syncAlways && o.groupCommit}
		if natsAuth != nil {
			ecfg.Configure = natsAuth.Configure
		}
		ecfg.TLS = natsServerTLS(o, sec)
		ns, err := store.StartEmbedded(ecfg)
		if err != nil {
			return err
		}
		defer ns.Shutdown()
		if ecfg.GroupCommit {
			if groupCommit, err = store.NewGroupCommit(ns); err != nil {
				return err
			}
		}
		url = localURL(ns.ClientURL())
		embedded = ns
		slog.Info("embedded NATS started", "url", url, "dataDir", o.dataDir, "syncAlways", o.syncAlways, "groupCommit", ecfg.GroupCommit)
	}
	if o.apiserver {
		if err := checkFree(o.apiAddr); err != nil {
			return err
		}
	}
	// A connection nats.go closes for good (the server closed it for a
	// protocol error; it does not reconnect then) ends the process with
	// an error, so its supervisor restarts it instead of leaving it up
	// and cut off from the cluster.
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	natsOpts, err := natsControlPlaneOptions(natsAuth)
	if err != nil {
		return err
	}
	connectURL = url
	if embedded != nil {
		// orca-server's own connection to its embedded NATS server is
		// in-process (nats-server's in-process client: a pipe in memory,
		// authenticated as any client, never on a network), so every
		// store write, watch event and relay message of the control
		// plane skips loopback TCP and its TLS records; agents still
		// connect over TLS.
		// (The URL's tls:// would make nats.go ask for TLS even so.)
		natsOpts = append(natsOpts, nats.InProcessServer(embedded))
		connectURL = "nats://" + strings.TrimPrefix(strings.TrimPrefix(url, "tls://"), "nats://")
	} else if natsOpts, err = withNATSClientTLS(natsOpts, o, sec); err != nil {
		return err
	}
	nc, err := nats.Connect(connectURL, append(natsOpts, nats.Name("orca-server"), nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: we closed the connection ourselves
				slog.Warn("NATS disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { slog.Info("NATS reconnected", "url", c.ConnectedUrl()) }),
		nats.ClosedHandler(func(c *nats.Conn) {
			if ctx.Err() == nil {
				err := fmt.Errorf("NATS connection closed: %v", c.LastError())
				slog.Error("orca-server cannot go on without NATS; exiting", "err", err)
				fail(err)
			}
		}))...)
	if err != nil {
		return fmt.Errorf("connect to NATS %s: %w", url, err)
	}
	defer nc.Close()
	st, err := store.New(nc, store.Config{Replicas: o.replicas, Transformers: transformers, GroupCommit: groupCommit})
	if err != nil {
		return err
	}
	defer st.Close()
	if err := natsBootstrap(ctx, st); err != nil {
		return err
	}
	// One registry of kinds for the apiserver and the controllers, so a
	// kind added at run time is served and collected alike.
	reg := builtin.New()

	g, ctx := errgroup.WithContext(ctx)
	// One informer per resource for the whole process: the Node
	// authorizer, RBAC, the scheduler and the controllers share them (and
	// their objects, which none of them modifies), so each resource is
	// cached and indexed once.
	informers := store.NewSharedInformers(st)
	informersCtx, stopInformers := context.WithCancel(ctx)
	informers.Start(informersCtx)
	defer func() { stopInformers(); informers.Wait() }()
	if o.apiserver {
		modules, err := wasm.NewModuleStore(ctx, st.JetStream())
		if err != nil {
			return err
		}
		images, err := imagestore.New(ctx, st.JetStream())
		if err != nil {
			return err
		}
		ch, err := sec.ChainWithInformers(ctx, st, informers)
		if err != nil {
			return err
		}
		auditor, err := o.audit.auditor(o.dataDir)
		if err != nil {
			return err
		}
		defer auditor.Close()
		api, err := apiserver.New(apiserver.Config{Store: st, Registry: reg, NATS: nc, Addr: o.apiAddr, ServiceCIDR: o.serviceCIDR, Modules: modules, Images: images,
			MaxRequestsInFlight: o.maxInflight, MaxMutatingRequestsInFlight: o.maxMutatingInflight,
			RequestTimeout: o.requestTimeout, MaxConnections: o.maxConnections,
			NATSCredentials: withNATSCA(natsIssuer(o, natsAuth, "nats"), o, sec),
			TLS:             ch.TLS, InsecureAddr: o.insecureAddr, Authenticator: ch.Authenticator, Authorizer: ch.Authorizer, RuleResolver: ch.RuleResolver, RBAC: ch.RBAC,
			PodSecurity: podSecurity,
			Audit:       auditor, MaxRequestsInFlightPerUser: o.audit.maxInflightPerUser, MaxLongRunningRequestsPerUser: o.audit.maxLongRunningPerUser,
			ServiceAccountTokens: ch.ServiceAccountTokens, Profiling: o.profiling})
		if err != nil {
			return err
		}
		g.Go(func() error { return api.Run(ctx) })
		kube, err := kubernetesServiceReconciler(o, st, reg, informers)
		if err != nil {
			return err
		}
		g.Go(func() error { kube.Run(ctx); return nil })
	}
	if o.scheduler && !o.disableScheduler {
		sched, err := scheduler.New(scheduler.Config{Store: st,
			Pods: informers.For(store.Pods), Nodes: informers.For(store.Nodes), RuntimeClasses: informers.For(store.RuntimeClasses),
			PersistentVolumeClaims: informers.For(core.PersistentVolumeClaims), PersistentVolumes: informers.For(core.PersistentVolumes),
			StorageClasses: informers.For(storage.StorageClasses)})
		if err != nil {
			return err
		}
		g.Go(func() error { return sched.Run(ctx) })
	}
	if o.controllers {
		clusterCIDR := ""
		if o.allocateNodeCIDRs {
			clusterCIDR = o.clusterCIDR
		}
		cm, err := controllers.New(controllers.Config{ClusterCIDR: clusterCIDR, NodeCIDRMaskSize: o.nodeCIDRMaskSize, DisableServiceLB: o.disableServiceLB, ResourceQuotaSyncPeriod: o.resourceQuotaSyncPeriod,
			DefaultLocalStoragePath: o.defaultLocalStoragePath, DisableLocalStorage: o.disableLocalStorage, Store: st, Registry: reg, Informers: informers, NodeMonitorGracePeriod: o.nodeGrace, EventTTL: o.eventTTL,
			RootCA: rootCA(sec), ClusterSigningCA: &csr.CA{Cert: sec.CA.Cert, Key: sec.CA.Key}, ClusterSigningDuration: o.clusterSigningDuration})
		if err != nil {
			return err
		}
		g.Go(func() error { return cm.Run(ctx) })
		if !o.apiserver {
			// The apiserver adds the kinds of CustomResourceDefinitions to
			// the registry; without it, this process does, so the gc and
			// namespace controllers cover custom resources.
			crds := apiextensions.NewController(st, reg, slog.Default())
			g.Go(func() error { crds.Run(ctx, 2); return nil })
		}
	}
	err = g.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	slog.Info("orca-server stopped")
	return err
}

// checkFree fails at once, with a clear message, when addr is taken.
func checkFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s (is another orca-server or program using it?): %w", addr, err)
	}
	return l.Close()
}
