package nodeagent

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
	"github.com/orca-edge/orca/runtimes"
)

// TestLeaseSurvivesNATSRestart: the NATS server goes away and comes back
// on the same address; the agent keeps running and renews its Lease again.
func TestLeaseSurvivesNATSRestart(t *testing.T) {
	dir := t.TempDir()
	srv, err := store.StartEmbedded(store.EmbeddedConfig{Port: -1, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, portStr, _ := net.SplitHostPort(srv.Addr().String())
	port, _ := strconv.Atoi(portStr)
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, err := store.New(nc, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := New(Config{Store: s, NATS: nc, NodeName: "flaky", DataDir: filepath.Join(t.TempDir(), "flaky"),
		Runtimes: []runtimes.Runtime{testruntime.New("runc")}, HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-a.Ready()

	renewTime := func() (time.Time, error) {
		o, err := s.Get(context.Background(), store.Leases, corev1.NamespaceNodeLease, "flaky")
		if err != nil {
			return time.Time{}, err
		}
		return o.(*coordinationv1.Lease).Spec.RenewTime.Time, nil
	}
	storetest.Eventually(t, 3*time.Second, func() error { _, err := renewTime(); return err })

	srv.Shutdown()
	srv.WaitForShutdown()
	down := time.Now()
	srv, err = store.StartEmbedded(store.EmbeddedConfig{Port: port, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	storetest.Eventually(t, 10*time.Second, func() error {
		rt, err := renewTime()
		if err != nil {
			return err
		}
		if !rt.After(down) {
			return fmt.Errorf("lease renewed at %s, before the restart at %s", rt, down)
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("agent ended during the NATS outage: %v", err)
	default:
	}
}
