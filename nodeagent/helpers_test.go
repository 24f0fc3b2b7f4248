package nodeagent

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/orca-edge/orca/controlplane/controllers/nodepods"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
	"github.com/orca-edge/orca/runtimes"
)

type env struct {
	t  testing.TB
	s  *store.Store
	nc *nats.Conn
}

// newEnv starts an embedded NATS server, a store and a NodePods mirror
// (standing in for the control plane's nodepods controller).
func newEnv(t testing.TB) *env {
	t.Helper()
	ns := storetest.StartNATS(t)
	nc, s := storetest.Connect(t, ns.ClientURL())
	e := &env{t: t, s: s, nc: nc}
	e.mirror()
	return e
}

// mirror runs the control plane's nodepods controller, which projects
// bound pods into store.NodePods for the agents.
func (e *env) mirror() {
	ctx, cancel := context.WithCancel(context.Background())
	inf := store.NewInformer(e.s, store.Pods)
	c := nodepods.New(e.s, inf)
	go inf.Run(ctx)
	if !inf.WaitForSync(ctx) {
		e.t.Fatal("pods informer did not sync")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx, 1); err != nil && ctx.Err() == nil {
			e.t.Errorf("nodepods controller: %v", err)
		}
	}()
	e.t.Cleanup(func() { cancel(); <-done })
}

// agent starts an agent for node with the given runtimes (default: one
// test runtime serving "runc") and returns it with its stop function.
func (e *env) agent(node string, mod func(*Config), rts ...runtimes.Runtime) (*Agent, func()) {
	e.t.Helper()
	if len(rts) == 0 {
		rts = []runtimes.Runtime{testruntime.New("runc")}
	}
	cfg := Config{Store: e.s, NATS: e.nc, NodeName: node, DataDir: filepath.Join(e.t.TempDir(), node), Runtimes: rts,
		HeartbeatInterval: 100 * time.Millisecond, StatusInterval: 200 * time.Millisecond,
		BackoffBase: 100 * time.Millisecond, BackoffMax: 400 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	// Volumes outlive a stopped agent (tmpfs of secrets and memory
	// emptyDirs); unmount them after the agent stopped, before the
	// temporary directory goes.
	e.t.Cleanup(func() { unmountUnder(cfg.DataDir) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		e.t.Fatalf("agent %s: %v", node, err)
	case <-time.After(10 * time.Second):
		e.t.Fatalf("agent %s not ready after 10s", node)
	}
	var stopped bool
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("agent %s: %v", node, err)
			}
		case <-time.After(10 * time.Second):
			e.t.Errorf("agent %s did not stop", node)
		}
	}
	e.t.Cleanup(stop)
	return a, stop
}

var podSeq int

// pod creates a pod and binds it to node, as the scheduler would.
func (e *env) pod(node string, p *corev1.Pod) *corev1.Pod {
	e.t.Helper()
	ctx := context.Background()
	if p.Namespace == "" {
		p.Namespace = "default"
	}
	podSeq++
	p.UID = types.UID(fmt.Sprintf("uid-%d-%d", time.Now().UnixNano(), podSeq))
	p.CreationTimestamp = metav1.Now()
	if _, err := e.s.Create(ctx, store.Pods, p); err != nil {
		e.t.Fatal(err)
	}
	out, err := e.s.Bind(ctx, p.Namespace, p.Name, "", node)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// getPod reads a pod from the store.
func (e *env) getPod(ns, name string) (*corev1.Pod, error) {
	o, err := e.s.Get(context.Background(), store.Pods, ns, name)
	if err != nil {
		return nil, err
	}
	return o.(*corev1.Pod), nil
}

// waitPod polls the pod until check passes.
func (e *env) waitPod(ns, name string, timeout time.Duration, check func(*corev1.Pod) error) *corev1.Pod {
	e.t.Helper()
	var last *corev1.Pod
	storetest.Eventually(e.t, timeout, func() error {
		p, err := e.getPod(ns, name)
		if err != nil {
			return err
		}
		last = p
		return check(p)
	})
	return last
}

func simplePod(name, image string, policy corev1.RestartPolicy) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       corev1.PodSpec{RestartPolicy: policy, Containers: []corev1.Container{{Name: "main", Image: image}}},
	}
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func phaseIs(want corev1.PodPhase) func(*corev1.Pod) error {
	return func(p *corev1.Pod) error {
		if p.Status.Phase != want {
			return fmt.Errorf("pod %s phase %q, want %q (statuses %+v)", p.Name, p.Status.Phase, want, p.Status.ContainerStatuses)
		}
		return nil
	}
}

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }

// cs0 returns the pod's first container status, or a zero one.
func cs0(p *corev1.Pod) corev1.ContainerStatus {
	if len(p.Status.ContainerStatuses) == 0 {
		return corev1.ContainerStatus{}
	}
	return p.Status.ContainerStatuses[0]
}

// markDeleted does what the apiserver does on a graceful DELETE: it sets
// deletionTimestamp and deletionGracePeriodSeconds.
func (e *env) markDeleted(ns, name string, grace int64) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.getPod(ns, name)
		if err != nil {
			return err
		}
		now := metav1.Now()
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, &grace
		_, err = e.s.Update(context.Background(), store.Pods, p)
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}
