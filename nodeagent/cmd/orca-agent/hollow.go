package main

// Hollow nodes (--hollow N): N simulated nodes in this process, as
// Kubernetes' kubemark, through the same agent code (nodeagent/hollow on
// the in-memory runtimes/fake). Each node joins on its own as a real one
// does (join.go: bootstrap token -> CSR -> NATS credentials, kept under
// <data-dir>/<node>/ and reused by later starts) and has its own NATS
// connection with its own node user.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/orca-edge/orca/nodeagent/hollow"
)

func addHollowFlags(f *pflag.FlagSet, o *options) {
	f.IntVar(&o.hollow, "hollow", 0, fmt.Sprintf("run this many simulated nodes (kubemark's hollow nodes, 1 to %d) instead of this machine's node: same agent code, pods on an in-memory runtime, no proxy, pod network or containerd; each node joins with --token on its own and keeps its credentials under --data-dir/<node>", hollow.MaxCount))
	f.StringVar(&o.hollowPrefix, "hollow-name-prefix", hollow.DefaultNamePrefix, "names of the hollow nodes: <prefix>0, <prefix>1, ...")
	f.StringSliceVar(&o.hollowCapacity, "hollow-capacity", nil, "capacity of each hollow node, name=quantity (default cpu=4,memory=16Gi,pods=110, kubemark's)")
}

// hollowCapacity parses --hollow-capacity.
func hollowCapacity(kvs []string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--hollow-capacity %q: want name=quantity (cpu=4)", kv)
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("--hollow-capacity %q: %w", kv, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("--hollow-capacity %q: must not be negative", kv)
		}
		out[corev1.ResourceName(k)] = q
	}
	return out, nil
}

// joinRetryMax is the longest pause between two joins of one hollow
// node: with thousands of nodes joining with one token, the apiserver
// answers some with 429 (its in-flight limits) or times out; the node
// tries again until --join-timeout passed since its first attempt.
const joinRetryMax = 10 * time.Second

// runHollow runs --hollow nodes until ctx ends.
func runHollow(ctx context.Context, o options, labels map[string]string, fail context.CancelCauseFunc) error {
	if o.hollow < 0 || o.hollow > hollow.MaxCount {
		return fmt.Errorf("--hollow %d: want 1 to %d", o.hollow, hollow.MaxCount)
	}
	if o.natsCreds != "" {
		return errors.New("--nats-creds names one node's user: hollow nodes join each with its own (--server, --token, --discovery-token-ca-cert-hash)")
	}
	if o.nodeNameSet {
		return errors.New("--node-name does not apply to --hollow: the nodes are named with --hollow-name-prefix")
	}
	if o.join.token != "" && (o.join.server == "" || o.join.caHash == "") {
		return errors.New("join: --server, --token and --discovery-token-ca-cert-hash are all needed (the hash is printed by `orca token create --print-join-command`)")
	}
	capacity, err := hollowCapacity(o.hollowCapacity)
	if err != nil {
		return err
	}
	connect := func(ctx context.Context, node string) (*nats.Conn, error) {
		no := o
		no.nodeName, no.dataDir = node, filepath.Join(o.dataDir, node)
		if err := os.MkdirAll(no.dataDir, 0o755); err != nil {
			return nil, err
		}
		first := time.Now()
		for attempt := 1; ; attempt++ {
			nc, _, err := connectNATS(ctx, no, fail)
			if err == nil {
				return nc, nil
			}
			pause := min(time.Duration(attempt)*time.Second, joinRetryMax)
			if ctx.Err() != nil || time.Since(first)+pause > o.join.timeout {
				return nil, err
			}
			slog.Warn("hollow node could not join, retrying", "node", node, "attempt", attempt, "in", pause, "err", err)
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(pause):
			}
		}
	}
	slog.Info("orca-agent starting hollow nodes", "count", o.hollow, "prefix", o.hollowPrefix, "dataDir", o.dataDir)
	err = hollow.Run(ctx, hollow.Config{Count: o.hollow, NamePrefix: o.hollowPrefix, Connect: connect, Capacity: capacity,
		Labels: labels, HeartbeatInterval: o.heartbeat, NodeStatusUpdateFrequency: o.nodeStatus, DataDir: o.dataDir, Logger: slog.Default()})
	if err == nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
	}
	slog.Info("orca-agent stopped", "hollowNodes", o.hollow)
	return err
}
