package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/scheduler"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

type cluster struct {
	t  *testing.T
	st *store.Store
}

// start runs a NATS server, a store and a scheduler with the default
// RuntimeClasses. The periodic retry is set to an hour so that tests prove
// the event-driven retries.
func start(t *testing.T, opts ...func(*scheduler.Config)) *cluster {
	t.Helper()
	st := storetest.NewStore(t)
	c := &cluster{t: t, st: st}
	c.runtimeClass("wasm", nodeapi.HandlerWasm)
	c.runtimeClass("runc", nodeapi.HandlerContainerd)

	cfg := scheduler.Config{Store: st, RetryInterval: time.Hour}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := scheduler.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	storetest.RunUntilCleanup(t, s.Run)
	return c
}

func (c *cluster) runtimeClass(name, handler string) {
	c.t.Helper()
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}
	if _, err := c.st.Create(context.Background(), store.RuntimeClasses, rc); err != nil {
		c.t.Fatal(err)
	}
}

type nodeOpt func(*corev1.Node)

func withLabels(kv ...string) nodeOpt {
	return func(n *corev1.Node) {
		for i := 0; i < len(kv); i += 2 {
			n.Labels[kv[i]] = kv[i+1]
		}
	}
}

func notReady(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }

// node creates a Ready node advertising the runc handler (unless opts
// change that) with cpu and memory allocatable and room for 20 pods.
func (c *cluster) node(name, cpu, memory string, opts ...nodeOpt) {
	c.t.Helper()
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse(memory),
		corev1.ResourcePods:   resource.MustParse("20"),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			nodeapi.RuntimeLabel(nodeapi.HandlerContainerd): "true",
			corev1.LabelHostname:                            name,
		}},
		Status: corev1.NodeStatus{
			Capacity:    res,
			Allocatable: res,
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:   []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		},
	}
	for _, o := range opts {
		o(n)
	}
	if _, err := c.st.Create(context.Background(), store.Nodes, n); err != nil {
		c.t.Fatal(err)
	}
}

// updateNode applies f to node name with compare-and-swap.
func (c *cluster) updateNode(name string, f func(*corev1.Node)) {
	c.t.Helper()
	o, err := c.st.Get(context.Background(), store.Nodes, "", name)
	if err != nil {
		c.t.Fatal(err)
	}
	n := o.(*corev1.Node)
	f(n)
	if _, err := c.st.Update(context.Background(), store.Nodes, n); err != nil {
		c.t.Fatal(err)
	}
}

type podOpt func(*corev1.Pod)

func ownedBy(uid string) podOpt {
	return func(p *corev1.Pod) {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs-" + uid, UID: types.UID(uid), Controller: &yes}}
	}
}

func requests(cpu string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
}

func nodeSelector(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			p.Spec.NodeSelector[kv[i]] = kv[i+1]
		}
	}
}

func runtimeClassName(name string) podOpt {
	return func(p *corev1.Pod) { p.Spec.RuntimeClassName = &name }
}

func hostPort(port int32) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: port}}
	}
}

func schedulerName(name string) podOpt {
	return func(p *corev1.Pod) { p.Spec.SchedulerName = name }
}

func (c *cluster) pod(name string, opts ...podOpt) {
	c.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "hello:v1"}}},
	}
	for _, o := range opts {
		o(p)
	}
	if _, err := c.st.Create(context.Background(), store.Pods, p); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) get(name string) *corev1.Pod {
	c.t.Helper()
	o, err := c.st.Get(context.Background(), store.Pods, "default", name)
	if err != nil {
		c.t.Fatal(err)
	}
	return o.(*corev1.Pod)
}

// boundTo waits until pod name is bound and returns its node.
func (c *cluster) boundTo(name string) string {
	c.t.Helper()
	var node string
	storetest.Eventually(c.t, 10*time.Second, func() error {
		p := c.get(name)
		if p.Spec.NodeName == "" {
			return fmt.Errorf("pod %s not bound; conditions %+v", name, p.Status.Conditions)
		}
		node = p.Spec.NodeName
		return nil
	})
	return node
}

// unschedulable waits until pod name has PodScheduled=False, reason
// Unschedulable, with message want.
func (c *cluster) unschedulable(name, want string) {
	c.t.Helper()
	storetest.Eventually(c.t, 10*time.Second, func() error {
		p := c.get(name)
		if p.Spec.NodeName != "" {
			return fmt.Errorf("pod %s was bound to %s", name, p.Spec.NodeName)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type != corev1.PodScheduled {
				continue
			}
			if cond.Status != corev1.ConditionFalse || cond.Reason != scheduler.ReasonUnschedulable || cond.Message != want {
				return fmt.Errorf("pod %s: PodScheduled %s %s %q, want False Unschedulable %q", name, cond.Status, cond.Reason, cond.Message, want)
			}
			return nil
		}
		return fmt.Errorf("pod %s has no PodScheduled condition", name)
	})
}

func TestBindsAndSpreadsByOwner(t *testing.T) {
	c := start(t)
	c.node("edge-1", "4", "4Gi")
	c.node("edge-2", "4", "4Gi")
	c.node("edge-3", "4", "4Gi")
	// The scheduler sees nodes through its informer a moment after they
	// are created: a pod created sooner is spread over the nodes seen so
	// far, as kube-scheduler would. Wait until it places a pod on each.
	for _, n := range []string{"edge-1", "edge-2", "edge-3"} {
		c.pod("seen-"+n, nodeSelector(corev1.LabelHostname, n))
		if got := c.boundTo("seen-" + n); got != n {
			t.Fatalf("pod seen-%s bound to %s", n, got)
		}
	}
	for i := range 6 {
		c.pod(fmt.Sprintf("web-%d", i), ownedBy("rs-web"))
	}
	c.pod("other", schedulerName("my-scheduler"))

	perNode := map[string]int{}
	for i := range 6 {
		perNode[c.boundTo(fmt.Sprintf("web-%d", i))]++
	}
	for _, n := range []string{"edge-1", "edge-2", "edge-3"} {
		if perNode[n] != 2 {
			t.Fatalf("pods per node %v, want 2 on each", perNode)
		}
	}
	p := c.get("web-0")
	if len(p.Status.Conditions) != 1 || p.Status.Conditions[0].Type != corev1.PodScheduled || p.Status.Conditions[0].Status != corev1.ConditionTrue {
		t.Fatalf("bound pod conditions %+v, want PodScheduled=True", p.Status.Conditions)
	}
	if n := c.get("other").Spec.NodeName; n != "" {
		t.Fatalf("pod for another scheduler was bound to %s", n)
	}
}

func TestUnschedulableUntilBiggerNode(t *testing.T) {
	c := start(t)
	c.node("small-1", "1", "1Gi")
	c.node("small-2", "1", "1Gi")
	c.pod("big", requests("2"))
	c.unschedulable("big", "0/2 nodes are available: 2 Insufficient cpu.")

	// A new node that does not fit either updates the message.
	c.node("small-3", "1", "1Gi", withLabels("zone", "north"))
	c.unschedulable("big", "0/3 nodes are available: 3 Insufficient cpu.")

	c.node("large", "4", "4Gi")
	if n := c.boundTo("big"); n != "large" {
		t.Fatalf("bound to %s, want large", n)
	}
	cond := c.get("big").Status.Conditions
	if len(cond) != 1 || cond[0].Status != corev1.ConditionTrue {
		t.Fatalf("conditions after binding %+v, want only PodScheduled=True", cond)
	}
	// Events as kube-scheduler records them: FailedScheduling once per
	// distinct message, then Scheduled.
	storetest.Eventually(t, 5*time.Second, func() error {
		objs, _, err := c.st.List(context.Background(), store.Events, "default")
		if err != nil {
			return err
		}
		var got []string
		for _, o := range objs {
			ev := o.(*corev1.Event)
			if ev.InvolvedObject.Name == "big" && ev.Source.Component == "default-scheduler" {
				got = append(got, ev.Reason+": "+ev.Message)
			}
		}
		// The pod may be seen before the nodes ("0/0 nodes are available"):
		// require the messages that follow the nodes, in any order.
		for _, want := range []string{"FailedScheduling: 0/2 nodes are available: 2 Insufficient cpu.", "FailedScheduling: 0/3 nodes are available: 3 Insufficient cpu.", "Scheduled: Successfully assigned default/big to large"} {
			if !slices.Contains(got, want) {
				return fmt.Errorf("events %q lack %q", got, want)
			}
		}
		return nil
	})

	// The large node now has 2 of 4 cpus free: a second big pod fits, a
	// third does not (the first two are counted even if the cache lags).
	c.pod("big-2", requests("2"))
	c.pod("big-3", requests("2"))
	c.pod("big-4", requests("2"))
	bound := 0
	storetest.Eventually(t, 10*time.Second, func() error {
		bound = 0
		waiting := 0
		for _, name := range []string{"big-2", "big-3", "big-4"} {
			p := c.get(name)
			if p.Spec.NodeName != "" {
				bound++
			} else if len(p.Status.Conditions) == 1 && p.Status.Conditions[0].Reason == scheduler.ReasonUnschedulable {
				waiting++
			}
		}
		if bound+waiting != 3 {
			return fmt.Errorf("%d bound, %d unschedulable", bound, waiting)
		}
		return nil
	})
	if bound != 1 {
		t.Fatalf("%d more 2-cpu pods bound to the 4-cpu node, want 1", bound)
	}
}

func TestNodeSelector(t *testing.T) {
	c := start(t)
	c.node("north", "2", "2Gi", withLabels("zone", "north"))
	c.node("south", "2", "2Gi", withLabels("zone", "south"))
	for i := range 3 {
		c.pod(fmt.Sprintf("s-%d", i), nodeSelector("zone", "south"))
	}
	for i := range 3 {
		if n := c.boundTo(fmt.Sprintf("s-%d", i)); n != "south" {
			t.Fatalf("s-%d bound to %s, want south", i, n)
		}
	}
	c.pod("east", nodeSelector("zone", "east"))
	c.unschedulable("east", "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.")
	c.updateNode("north", func(n *corev1.Node) { n.Labels["zone"] = "east" })
	if n := c.boundTo("east"); n != "north" {
		t.Fatalf("east bound to %s, want north", n)
	}
}

func TestRuntimeClass(t *testing.T) {
	c := start(t)
	c.node("runc-only", "2", "2Gi")
	c.node("wasm-node", "2", "2Gi", withLabels(nodeapi.RuntimeLabel(nodeapi.HandlerWasm), "true"))
	for i := range 3 {
		c.pod(fmt.Sprintf("w-%d", i), runtimeClassName("wasm"))
	}
	for i := range 3 {
		if n := c.boundTo(fmt.Sprintf("w-%d", i)); n != "wasm-node" {
			t.Fatalf("w-%d bound to %s, want wasm-node", i, n)
		}
	}

	c.pod("gvisor", runtimeClassName("gvisor"))
	c.unschedulable("gvisor", `0/2 nodes are available: RuntimeClass "gvisor" not found.`)
	c.runtimeClass("gvisor", "runsc")
	c.unschedulable("gvisor", `0/2 nodes are available: 2 node(s) didn't have runtime handler "runsc".`)
	c.updateNode("runc-only", func(n *corev1.Node) { n.Labels[nodeapi.RuntimeLabel("runsc")] = "true" })
	if n := c.boundTo("gvisor"); n != "runc-only" {
		t.Fatalf("gvisor bound to %s, want runc-only", n)
	}
}

func TestHostPortsAndReadiness(t *testing.T) {
	c := start(t)
	c.node("edge-1", "2", "2Gi")
	c.node("edge-2", "2", "2Gi")
	c.node("edge-3", "2", "2Gi", notReady)
	c.pod("http-1", hostPort(8080))
	c.pod("http-2", hostPort(8080))
	n1, n2 := c.boundTo("http-1"), c.boundTo("http-2")
	if n1 == n2 {
		t.Fatalf("both pods with hostPort 8080 bound to %s", n1)
	}
	if n1 == "edge-3" || n2 == "edge-3" {
		t.Fatal("a pod was bound to the node that is not ready")
	}
	c.pod("http-3", hostPort(8080))
	msg := "0/3 nodes are available: 1 node(s) were not ready, 2 node(s) didn't have free ports for the requested pod ports."
	c.unschedulable("http-3", msg)
	c.updateNode("edge-3", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionTrue })
	if n := c.boundTo("http-3"); n != "edge-3" {
		t.Fatalf("http-3 bound to %s, want edge-3", n)
	}

	// Deleting a pod frees its port for a waiting pod.
	c.pod("http-4", hostPort(8080))
	c.unschedulable("http-4", "0/3 nodes are available: 3 node(s) didn't have free ports for the requested pod ports.")
	if _, err := c.st.Delete(context.Background(), store.Pods, "default", "http-1", ""); err != nil {
		t.Fatal(err)
	}
	if n := c.boundTo("http-4"); n != n1 {
		t.Fatalf("http-4 bound to %s, want %s", n, n1)
	}
	if !strings.HasPrefix(n1, "edge-") {
		t.Fatalf("unexpected node %s", n1)
	}
}

// attempts is a slog handler that counts "pod unschedulable" records by pod.
type attempts struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *attempts) Enabled(context.Context, slog.Level) bool { return true }
func (a *attempts) WithAttrs([]slog.Attr) slog.Handler       { return a }
func (a *attempts) WithGroup(string) slog.Handler            { return a }
func (a *attempts) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "pod unschedulable" {
		return nil
	}
	r.Attrs(func(at slog.Attr) bool {
		if at.Key == "pod" {
			a.mu.Lock()
			a.n[at.Value.String()]++
			a.mu.Unlock()
		}
		return true
	})
	return nil
}

func (a *attempts) count(pod string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[pod]
}

func TestPeriodicRetryWritesStatusOnce(t *testing.T) {
	a := &attempts{n: map[string]int{}}
	c := start(t, func(cfg *scheduler.Config) {
		cfg.RetryInterval = 50 * time.Millisecond
		cfg.Logger = slog.New(a)
	})
	c.node("small", "1", "1Gi")
	c.pod("big", requests("2"))
	c.unschedulable("big", "0/1 nodes are available: 1 Insufficient cpu.")
	rv := c.get("big").ResourceVersion
	first := a.count("default/big")

	// The periodic retry tries again and again without any event...
	storetest.Eventually(t, 10*time.Second, func() error {
		if n := a.count("default/big"); n < first+3 {
			return fmt.Errorf("%d attempts, want at least %d", n, first+3)
		}
		return nil
	})
	// ...and, the message being the same, never writes the pod again.
	if got := c.get("big").ResourceVersion; got != rv {
		t.Fatalf("resourceVersion moved from %s to %s: the status was rewritten", rv, got)
	}

	// A node heartbeat-like update (nothing the plugins look at) is fine
	// too, and a pod for another scheduler is never attempted.
	c.pod("mine", schedulerName("my-scheduler"), requests("2"))
	c.updateNode("small", func(n *corev1.Node) { n.Status.Conditions[0].Message = "kubelet is posting ready status" })
	n := a.count("default/big")
	storetest.Eventually(t, 10*time.Second, func() error {
		if a.count("default/big") < n+2 {
			return fmt.Errorf("no further attempts")
		}
		return nil
	})
	if a.count("default/mine") != 0 || len(c.get("mine").Status.Conditions) != 0 {
		t.Fatal("the pod of another scheduler was attempted")
	}
}
