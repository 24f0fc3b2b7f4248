// Package hollow runs many simulated nodes in one process, as Kubernetes'
// kubemark hollow nodes: each is a real nodeagent.Agent (registration,
// Lease heartbeats, pod workers, status, events, logs and exec over
// NATS) whose pods run on the in-memory runtime (runtimes/fake) instead
// of containerd or wazero. The control plane cannot tell a hollow node
// from a real one: it has its own NATS connection with its own node
// credentials, and it reads and writes exactly what a real node may
// (its NodePods projection, the relay), so the scheduler, controllers,
// apiserver and store can be driven at 1,000 or 5,000 nodes from one
// machine.
//
// What a hollow node does not have: a service proxy, a pod network (pods'
// IP is their node's, an address of 198.18.0.0/15, the range reserved for
// benchmarks by RFC 2544, never contacted), containerd, image pulls and
// image garbage collection, mounts (Secret and memory volumes are
// directories on disk: nodeagent.Config.NoMounts), TCP, HTTP and gRPC
// probes' targets (such probes fail; exec probes succeed, see
// runtimes/fake).
package hollow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/nodeagent"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/fake"
)

// DefaultNamePrefix is Config.NamePrefix's default: nodes are
// "hollow-node-0", "hollow-node-1", ...
const DefaultNamePrefix = "hollow-node-"

// MaxCount is the most hollow nodes of one Run: the addresses of
// 198.18.0.0/15.
const MaxCount = 1 << 17

// DefaultStartConcurrency is Config.StartConcurrency's default.
const DefaultStartConcurrency = 32

// DefaultNodeStatusUpdateFrequency is Config.NodeStatusUpdateFrequency's
// default: 1 minute. The kubelet reads its Node from an informer of its
// own, at no cost to the apiserver; a node agent reads it over the relay,
// so at 10 s 5,000 hollow nodes would add 500 reads a second to their 500
// Lease renewals. A node still checks it at once after a failed renewal
// (nodeagent's heartbeat loop), when the node lifecycle controller may
// have marked it Unknown.
const DefaultNodeStatusUpdateFrequency = time.Minute

// DefaultCapacity is the capacity of a hollow node, kubemark's: 4 CPUs,
// 16Gi of memory, 110 pods.
func DefaultCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
}

// Config configures Run. Count and Connect are required.
type Config struct {
	// Count is the number of nodes, 1 to MaxCount.
	Count int
	// NamePrefix names the nodes NamePrefix + "0" ... NamePrefix +
	// "<Count-1>"; default DefaultNamePrefix. The names must be DNS-1123
	// subdomains.
	NamePrefix string
	// Connect returns the NATS connection of node, authenticated as that
	// node (orca-agent --hollow joins each node with the bootstrap token
	// and keeps its credentials under <data-dir>/<node>/). Run closes
	// the connection when it returns. Required.
	Connect func(ctx context.Context, node string) (*nats.Conn, error)
	// API returns node's access to the apiserver over nc; default
	// nodeagent.NewRelayAPI (the relay, authorized as the node).
	API func(nc *nats.Conn, node string) nodeagent.API
	// Capacity of every node; missing entries are DefaultCapacity's.
	Capacity corev1.ResourceList
	// Labels are extra labels of every node.
	Labels map[string]string
	// HeartbeatInterval is each node's Lease renew period; default
	// nodeagent's (10s).
	HeartbeatInterval time.Duration
	// NodeStatusUpdateFrequency is how often each node reads its Node
	// back (nodeagent.Config's); default DefaultNodeStatusUpdateFrequency.
	NodeStatusUpdateFrequency time.Duration
	// DataDir holds each node's files (pod logs, volumes) under
	// <DataDir>/<node>/; default a directory "orca-hollow" under
	// os.TempDir.
	DataDir string
	// StartConcurrency bounds the nodes connecting and registering at
	// once; default DefaultStartConcurrency.
	StartConcurrency int
	// Started, when set, is called once per node when its agent is ready
	// (registered, informers synced, serving logs), from the node's
	// goroutine.
	Started func(node string)
	// Logger; default slog.Default(). Each node's records carry
	// node=<name>.
	Logger *slog.Logger
}

// NodeName returns the name of hollow node i of prefix ("" prefix:
// DefaultNamePrefix).
func NodeName(prefix string, i int) string {
	if prefix == "" {
		prefix = DefaultNamePrefix
	}
	return fmt.Sprintf("%s%d", prefix, i)
}

// NodeIP returns the InternalIP of hollow node i (0 <= i < MaxCount):
// 198.18.0.0 + i.
func NodeIP(i int) string {
	base := netip.MustParseAddr("198.18.0.0").As4()
	n := (uint32(base[0])<<24 | uint32(base[1])<<16) + uint32(i)
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}).String()
}

func (c Config) withDefaults() (Config, error) {
	if c.Count < 1 || c.Count > MaxCount {
		return c, fmt.Errorf("hollow: Count %d: want 1 to %d", c.Count, MaxCount)
	}
	if c.Connect == nil {
		return c, errors.New("hollow: Config.Connect is required")
	}
	if c.NamePrefix == "" {
		c.NamePrefix = DefaultNamePrefix
	}
	if c.API == nil {
		c.API = func(nc *nats.Conn, node string) nodeagent.API { return nodeagent.NewRelayAPI(nc, node) }
	}
	capacity := DefaultCapacity()
	for k, v := range c.Capacity {
		capacity[k] = v.DeepCopy()
	}
	c.Capacity = capacity
	if c.DataDir == "" {
		c.DataDir = filepath.Join(os.TempDir(), "orca-hollow")
	}
	if c.NodeStatusUpdateFrequency <= 0 {
		c.NodeStatusUpdateFrequency = DefaultNodeStatusUpdateFrequency
	}
	if c.StartConcurrency <= 0 {
		c.StartConcurrency = DefaultStartConcurrency
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Run runs cfg.Count hollow nodes until ctx ends. Nodes start
// StartConcurrency at a time. It returns nil once ctx ended and every
// node stopped, or the first error of a node that could not start
// (connect, agent configuration, registration), after stopping the
// others.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	rcs, svcs, stopRCs, err := sharedRuntimeClasses(ctx, cfg)
	if err != nil {
		return err
	}
	if rcs == nil {
		return nil // ctx ended
	}
	defer stopRCs()
	sem := make(chan struct{}, cfg.StartConcurrency)
	var wg sync.WaitGroup
	for i := range cfg.Count {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			release := func() { once.Do(func() { <-sem }) }
			defer release()
			if err := runNode(ctx, cfg, i, rcs, svcs, release); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// sharedRuntimeClasses starts the RuntimeClasses and Services informers
// every node of the process shares, over a connection of its own as the
// first node (every node may read every RuntimeClass and Service: no node
// reads more than it could alone), and returns them once synced with
// their stop function. It returns nils when ctx ended first.
func sharedRuntimeClasses(ctx context.Context, cfg Config) (*store.Informer, *store.Informer, func(), error) {
	name := NodeName(cfg.NamePrefix, 0)
	nc, err := cfg.Connect(ctx, name)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, nil, nil
		}
		return nil, nil, nil, fmt.Errorf("hollow node %s: connect: %w", name, err)
	}
	st, err := store.New(nc, store.Config{BindOnly: true})
	if err != nil {
		nc.Close()
		return nil, nil, nil, fmt.Errorf("hollow node %s: %w", name, err)
	}
	inf, svcs := store.NewInformer(st, store.RuntimeClasses), store.NewInformer(st, store.Services)
	ictx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { inf.Run(ictx); done <- struct{}{} }()
	go func() { svcs.Run(ictx); done <- struct{}{} }()
	stop := func() { cancel(); <-done; <-done; st.Close(); nc.Close() }
	if !inf.WaitForSync(ctx) || !svcs.WaitForSync(ctx) {
		stop()
		return nil, nil, nil, nil
	}
	return inf, svcs, stop, nil
}

// runNode runs hollow node i until ctx ends; started is called once the
// agent is ready (or failed).
func runNode(ctx context.Context, cfg Config, i int, rcs, svcs *store.Informer, started func()) error {
	name := NodeName(cfg.NamePrefix, i)
	nc, err := cfg.Connect(ctx, name)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("hollow node %s: connect: %w", name, err)
	}
	defer nc.Close()
	st, err := store.New(nc, store.Config{BindOnly: true})
	if err != nil {
		return fmt.Errorf("hollow node %s: %w", name, err)
	}
	defer st.Close()
	rts := []runtimes.Runtime{
		fake.New(fake.Config{Handler: nodeapi.HandlerContainerd}),
		fake.New(fake.Config{Handler: nodeapi.HandlerWasm}),
	}
	defer func() {
		for _, rt := range rts {
			rt.Close(context.Background())
		}
	}()
	labels := map[string]string{}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	a, err := nodeagent.New(nodeagent.Config{
		Store: st, API: cfg.API(nc, name), NATS: nc, NodeName: name, NodeIP: NodeIP(i),
		DataDir: filepath.Join(cfg.DataDir, name), Runtimes: rts, Capacity: cfg.Capacity, Labels: labels,
		HeartbeatInterval: cfg.HeartbeatInterval, NodeStatusUpdateFrequency: cfg.NodeStatusUpdateFrequency, RuntimeClasses: rcs, Services: svcs,
		// No mounts (no tmpfs per Secret volume: nothing reads them)
		// and no image garbage collection: the fake runtime holds no images.
		NoMounts: true,
		ImageGC:  nodeagent.ImageGCConfig{HighThresholdPercent: 100, LowThresholdPercent: 99},
		Logger:   cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("hollow node %s: %w", name, err)
	}
	go func() {
		select {
		case <-a.Ready():
			started()
			if cfg.Started != nil {
				cfg.Started(name)
			}
		case <-ctx.Done():
		}
	}()
	if err := a.Run(ctx); err != nil {
		return fmt.Errorf("hollow node %s: %w", name, err)
	}
	return nil
}
