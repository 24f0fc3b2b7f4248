package daemonset_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"github.com/orca-edge/orca/controlplane/controllers/daemonset"
	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/apps"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/scheduler"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

const wait = 30 * time.Second

type env struct {
	t   *testing.T
	s   *store.Store
	reg *registry.Registry
	ctx context.Context

	mu       sync.Mutex
	observer func([]*corev1.Pod) // called with every pod after each pod event
}

// start runs, over a store on in-process NATS, the real scheduler and a
// fake kubelet (bound pods become Running and Ready, terminating pods are
// removed), but not the DaemonSet controller: see runController.
func start(t *testing.T) *env {
	e := &env{t: t, s: storetest.NewStore(t), reg: builtin.New(), ctx: context.Background()}
	inf := store.NewSharedInformers(e.s)
	sched, err := scheduler.New(scheduler.Config{Store: e.s, RetryInterval: time.Second, Pods: inf.For(store.Pods), Nodes: inf.For(store.Nodes),
		RuntimeClasses: inf.For(store.RuntimeClasses), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	pods := inf.For(store.Pods)
	work := make(chan string, 1024)
	pods.AddHandler(store.Handler{
		OnAdd:    func(o store.Object) { work <- o.GetName(); e.observe(pods) },
		OnUpdate: func(_, n store.Object) { work <- n.GetName(); e.observe(pods) },
		OnDelete: func(store.Object) { e.observe(pods) },
	})
	storetest.RunUntilCleanup(t, func(ctx context.Context) error {
		inf.Start(ctx)
		go e.kubelet(ctx, work)
		err := sched.Run(ctx)
		inf.Wait()
		return err
	})
	return e
}

func (e *env) observe(pods *store.Informer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.observer == nil {
		return
	}
	var all []*corev1.Pod
	for _, o := range pods.List("default", nil) {
		all = append(all, o.(*corev1.Pod))
	}
	e.observer(all)
}

// kubelet plays every node's agent: a bound pod is set Running and Ready
// (unless labelled fail=true: then Failed), a pod being deleted is removed.
func (e *env) kubelet(ctx context.Context, work chan string) {
	for {
		var name string
		select {
		case <-ctx.Done():
			return
		case name = <-work:
		}
		o, err := e.s.Get(ctx, store.Pods, "default", name)
		if err != nil {
			continue
		}
		p := o.(*corev1.Pod)
		switch {
		case p.DeletionTimestamp != nil:
			_, _ = e.s.Delete(ctx, store.Pods, p.Namespace, p.Name, "")
		case p.Spec.NodeName != "" && p.Status.Phase == corev1.PodPending || p.Status.Phase == "":
			if p.Spec.NodeName == "" {
				continue
			}
			now := metav1.Now()
			if p.Labels["fail"] == "true" {
				p.Status.Phase = corev1.PodFailed
			} else {
				p.Status.Phase = corev1.PodRunning
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
			}
			_, _ = e.s.Update(ctx, store.Pods, p)
		}
	}
}

// runController runs a DaemonSet controller with informers of its own
// until the returned function is called (or the test ends).
func (e *env) runController() (stop func()) {
	inf := store.NewSharedInformers(e.s)
	c := daemonset.New(e.s, e.reg, inf.For(apps.DaemonSets), inf.For(apps.ControllerRevisions), inf.For(store.Pods), inf.For(store.Nodes))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.Start(ctx)
		for _, r := range []store.Resource{apps.DaemonSets, apps.ControllerRevisions, store.Pods, store.Nodes} {
			inf.For(r).WaitForSync(ctx)
		}
		c.Run(ctx, 2)
		inf.Wait()
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	e.t.Cleanup(stop)
	return stop
}

func (e *env) node(name string, lbls map[string]string, taints ...corev1.Taint) {
	e.t.Helper()
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("20")}
	l := map[string]string{corev1.LabelHostname: name, nodeapi.RuntimeLabel(nodeapi.HandlerWasm): "true", nodeapi.RuntimeLabel(nodeapi.HandlerContainerd): "true"}
	for k, v := range lbls {
		l[k] = v
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}, Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	if _, err := e.reg.Create(e.ctx, e.s, store.Nodes, n); err != nil {
		e.t.Fatalf("create node %s: %v", name, err)
	}
}

func (e *env) updateNode(name string, f func(*corev1.Node)) {
	e.t.Helper()
	if _, err := e.reg.GuaranteedUpdate(e.ctx, e.s, store.Nodes, "", name, nil, func(o store.Object) (store.Object, error) {
		n := o.(*corev1.Node)
		f(n)
		return n, nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

func dsOf(name string, mut ...func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "docker.io/library/hello-container:v1"}}}}}}
	for _, m := range mut {
		m(ds)
	}
	return ds
}

func (e *env) createDS(ds *appsv1.DaemonSet) *appsv1.DaemonSet {
	e.t.Helper()
	out, err := e.reg.Create(e.ctx, e.s, apps.DaemonSets, ds)
	if err != nil {
		e.t.Fatal(err)
	}
	return out.(*appsv1.DaemonSet)
}

func (e *env) updateDS(name string, f func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	e.t.Helper()
	out, err := e.reg.GuaranteedUpdate(e.ctx, e.s, apps.DaemonSets, "default", name, nil, func(o store.Object) (store.Object, error) {
		ds := o.(*appsv1.DaemonSet)
		f(ds)
		return ds, nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out.(*appsv1.DaemonSet)
}

func (e *env) getDS(name string) *appsv1.DaemonSet {
	e.t.Helper()
	o, err := e.s.Get(e.ctx, apps.DaemonSets, "default", name)
	if err != nil {
		e.t.Fatal(err)
	}
	return o.(*appsv1.DaemonSet)
}

// pods returns the DaemonSet's pods (by controller uid), every one.
func (e *env) pods(ds *appsv1.DaemonSet) []*corev1.Pod {
	e.t.Helper()
	objs, _, err := e.s.List(e.ctx, store.Pods, "default")
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*corev1.Pod
	for _, o := range objs {
		p := o.(*corev1.Pod)
		if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == ds.UID {
			out = append(out, p)
		}
	}
	return out
}

// placement is "node=hash" of each running, ready pod, sorted; "" when a
// pod is not yet bound and ready or some are terminating.
func placement(pods []*corev1.Pod) (string, error) {
	var out []string
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			return "", fmt.Errorf("pod %s not running on a node yet (node %q phase %s)", p.Name, p.Spec.NodeName, p.Status.Phase)
		}
		out = append(out, p.Spec.NodeName)
	}
	sort.Strings(out)
	return strings.Join(out, ","), nil
}

// waitPlaced waits until the DaemonSet runs exactly one ready pod on each
// of nodes (comma-separated, sorted) and its status says so.
func (e *env) waitPlaced(ds *appsv1.DaemonSet, nodes string) {
	e.t.Helper()
	n := int32(len(strings.Split(nodes, ",")))
	if nodes == "" {
		n = 0
	}
	storetest.Eventually(e.t, wait, func() error {
		got, err := placement(e.pods(ds))
		if err != nil {
			return err
		}
		if got != nodes {
			return fmt.Errorf("pods on %q, want %q", got, nodes)
		}
		st := e.getDS(ds.Name)
		if st.Status.DesiredNumberScheduled != n || st.Status.CurrentNumberScheduled != n || st.Status.NumberReady != n || st.Status.NumberAvailable != n ||
			st.Status.NumberMisscheduled != 0 || st.Status.NumberUnavailable != 0 || st.Status.ObservedGeneration != st.Generation {
			return fmt.Errorf("status %+v", st.Status)
		}
		return nil
	})
}

// TestFollowsNodes: one pod per node, each placed by the scheduler through
// the matchFields term and carrying the daemon tolerations; a node added
// gets a pod, a node tainted NoExecute loses it, a NoSchedule taint keeps
// the running pod but a new NoSchedule-tainted node gets none, a node
// removed loses its pod; Events as Kubernetes'.
func TestFollowsNodes(t *testing.T) {
	e := start(t)
	e.runController()
	e.node("n1", nil)
	e.node("n2", nil)
	ds := e.createDS(dsOf("agent"))
	e.waitPlaced(ds, "n1,n2")
	for _, p := range e.pods(ds) {
		terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) != 1 || len(terms[0].MatchFields) != 1 || terms[0].MatchFields[0].Key != "metadata.name" || terms[0].MatchFields[0].Values[0] != p.Spec.NodeName {
			t.Errorf("pod %s: affinity %+v", p.Name, terms)
		}
		keys := map[string]corev1.TaintEffect{}
		for _, tol := range p.Spec.Tolerations {
			keys[tol.Key] = tol.Effect
		}
		for k, eff := range map[string]corev1.TaintEffect{corev1.TaintNodeNotReady: corev1.TaintEffectNoExecute, corev1.TaintNodeUnreachable: corev1.TaintEffectNoExecute,
			corev1.TaintNodeDiskPressure: corev1.TaintEffectNoSchedule, corev1.TaintNodeMemoryPressure: corev1.TaintEffectNoSchedule,
			corev1.TaintNodePIDPressure: corev1.TaintEffectNoSchedule, corev1.TaintNodeUnschedulable: corev1.TaintEffectNoSchedule} {
			if keys[k] != eff {
				t.Errorf("pod %s: toleration %s %q, want %s", p.Name, k, keys[k], eff)
			}
		}
		if _, ok := keys[corev1.TaintNodeNetworkUnavailable]; ok {
			t.Errorf("pod %s without hostNetwork tolerates network-unavailable", p.Name)
		}
		if p.Labels[daemonset.HashLabel] == "" || p.Labels[daemonset.TemplateGenerationLabel] != "1" {
			t.Errorf("pod %s labels %v", p.Name, p.Labels)
		}
	}

	e.node("n3", nil)
	e.waitPlaced(ds, "n1,n2,n3")

	e.updateNode("n2", func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "maintenance", Value: "true", Effect: corev1.TaintEffectNoExecute})
	})
	e.waitPlaced(ds, "n1,n3")

	// NoSchedule: the running pod stays (counted misscheduled, as
	// Kubernetes), a new node so tainted gets none.
	e.updateNode("n3", func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule})
	})
	e.node("n4", nil, corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule})
	storetest.Eventually(t, wait, func() error {
		st := e.getDS(ds.Name).Status
		if st.DesiredNumberScheduled != 1 || st.NumberMisscheduled != 1 || st.CurrentNumberScheduled != 1 {
			return fmt.Errorf("status %+v", st)
		}
		if got, err := placement(e.pods(ds)); err != nil || got != "n1,n3" {
			return fmt.Errorf("pods on %q (%v)", got, err)
		}
		return nil
	})

	// A cordoned node keeps and gets daemon pods (unschedulable toleration).
	e.updateNode("n2", func(n *corev1.Node) { n.Spec.Taints = nil; n.Spec.Unschedulable = true })
	e.updateNode("n3", func(n *corev1.Node) { n.Spec.Taints = nil })
	e.waitPlaced(ds, "n1,n2,n3")

	if _, err := e.reg.Delete(e.ctx, e.s, store.Nodes, "", "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPlaced(ds, "n2,n3")

	storetest.Eventually(t, wait, func() error {
		objs, _, err := e.s.List(e.ctx, store.Events, "default")
		if err != nil {
			return err
		}
		reasons := map[string]int{}
		for _, o := range objs {
			ev := o.(*corev1.Event)
			if ev.InvolvedObject.UID == ds.UID && ev.Source.Component == "daemonset-controller" {
				reasons[ev.Reason]++
			}
		}
		if reasons["SuccessfulCreate"] < 4 || reasons["SuccessfulDelete"] < 2 {
			return fmt.Errorf("events %v", reasons)
		}
		return nil
	})
}

// TestNodeSelectorAffinityTolerations: nodeSelector and required node
// affinity choose the nodes, relabelling moves pods, a toleration of a
// NoExecute taint keeps the pod.
func TestNodeSelectorAffinityTolerations(t *testing.T) {
	e := start(t)
	e.runController()
	e.node("a1", map[string]string{"disk": "ssd", "zone": "a"})
	e.node("a2", map[string]string{"disk": "hdd", "zone": "a"})
	e.node("b1", map[string]string{"disk": "ssd", "zone": "b"})
	sel := e.createDS(dsOf("ssd", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeSelector = map[string]string{"disk": "ssd"} }))
	aff := e.createDS(dsOf("zonea", func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}}}}
		ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "edge.io/flaky", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
	}))
	e.waitPlaced(sel, "a1,b1")
	e.waitPlaced(aff, "a1,a2")

	e.updateNode("a2", func(n *corev1.Node) { n.Labels["disk"] = "ssd" })
	e.updateNode("b1", func(n *corev1.Node) { n.Labels["disk"] = "hdd"; n.Labels["zone"] = "a" })
	e.waitPlaced(sel, "a1,a2")
	e.waitPlaced(aff, "a1,a2,b1")

	// Tolerated NoExecute taint: kept; untolerated: the other loses it.
	before := map[string]string{}
	for _, p := range e.pods(aff) {
		before[p.Spec.NodeName] = p.Name
	}
	e.updateNode("a1", func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "edge.io/flaky", Effect: corev1.TaintEffectNoExecute}}
	})
	e.waitPlaced(sel, "a2")
	e.waitPlaced(aff, "a1,a2,b1")
	for _, p := range e.pods(aff) {
		if before[p.Spec.NodeName] != p.Name {
			t.Errorf("pod on %s replaced: %s, was %s", p.Spec.NodeName, p.Name, before[p.Spec.NodeName])
		}
	}
}

// unavailableNodes counts the nodes of want without a running, ready
// pod of the DaemonSet uid that is not terminating, and the nodes being
// surged: two pods not terminating, one of them not ready.
func unavailableNodes(pods []*corev1.Pod, uid string, want []string) (unavailable, surging int) {
	ready, count := map[string]int{}, map[string]int{}
	for _, p := range pods {
		ref := metav1.GetControllerOf(p)
		if ref == nil || string(ref.UID) != uid || p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		count[p.Spec.NodeName]++
		if p.Status.Phase == corev1.PodRunning && len(p.Status.Conditions) > 0 && p.Status.Conditions[0].Status == corev1.ConditionTrue {
			ready[p.Spec.NodeName]++
		}
	}
	for _, n := range want {
		if ready[n] == 0 {
			unavailable++
		}
		if count[n] > 1 && ready[n] < count[n] {
			surging++
		}
	}
	return unavailable, surging
}

// rollout changes the image and waits until every pod on nodes has the new
// revision, returning the most nodes seen unavailable at once and being
// surged at once.
func (e *env) rollout(ds *appsv1.DaemonSet, nodes []string, image string) (maxUnavailable, maxDoubled int) {
	e.t.Helper()
	e.mu.Lock()
	e.observer = func(pods []*corev1.Pod) {
		u, d := unavailableNodes(pods, string(ds.UID), nodes)
		maxUnavailable, maxDoubled = max(maxUnavailable, u), max(maxDoubled, d)
	}
	e.mu.Unlock()
	defer func() { e.mu.Lock(); e.observer = nil; e.mu.Unlock() }()
	updated := e.updateDS(ds.Name, func(d *appsv1.DaemonSet) { d.Spec.Template.Spec.Containers[0].Image = image })
	storetest.Eventually(e.t, wait, func() error {
		pods := e.pods(ds)
		for _, p := range pods {
			if p.Spec.Containers[0].Image != image {
				return fmt.Errorf("pod %s still %s", p.Name, p.Spec.Containers[0].Image)
			}
		}
		if _, err := placement(pods); err != nil {
			return err
		}
		st := e.getDS(ds.Name)
		n := int32(len(nodes))
		if st.Status.ObservedGeneration != updated.Generation || st.Status.UpdatedNumberScheduled != n || st.Status.NumberAvailable != n || len(pods) != len(nodes) {
			return fmt.Errorf("status %+v, %d pods", st.Status, len(pods))
		}
		return nil
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	return maxUnavailable, maxDoubled
}

// TestRollingUpdateMaxUnavailable: a template change replaces the pods
// with at most maxUnavailable nodes without a ready pod and never two pods
// on a node; pods carry the new revision's hash and template generation;
// the ControllerRevisions follow.
func TestRollingUpdateMaxUnavailable(t *testing.T) {
	e := start(t)
	e.runController()
	nodes := []string{"n1", "n2", "n3", "n4", "n5"}
	for _, n := range nodes {
		e.node(n, nil)
	}
	two := intstr.FromInt32(2)
	ds := e.createDS(dsOf("roll", func(ds *appsv1.DaemonSet) {
		ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &two}
	}))
	e.waitPlaced(ds, strings.Join(nodes, ","))
	unavailable, doubled := e.rollout(ds, nodes, "docker.io/library/hello-container:v2")
	if unavailable > 2 || unavailable == 0 || doubled != 0 {
		t.Errorf("at most %d nodes unavailable and %d with two pods during the rollout, want 1..2 and 0", unavailable, doubled)
	}
	cur := e.getDS(ds.Name)
	for _, p := range e.pods(ds) {
		if p.Labels[daemonset.TemplateGenerationLabel] != "2" {
			t.Errorf("pod %s labels %v", p.Name, p.Labels)
		}
	}
	revs := e.revisions(cur)
	if len(revs) != 2 || revs[0].Revision != 1 || revs[1].Revision != 2 || revs[1].Labels[daemonset.HashLabel] != e.pods(ds)[0].Labels[daemonset.HashLabel] {
		t.Fatalf("revisions %v", revNames(revs))
	}
}

func (e *env) revisions(ds *appsv1.DaemonSet) []*appsv1.ControllerRevision {
	e.t.Helper()
	objs, _, err := e.s.List(e.ctx, apps.ControllerRevisions, "default")
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*appsv1.ControllerRevision
	for _, o := range objs {
		r := o.(*appsv1.ControllerRevision)
		if ref := metav1.GetControllerOf(r); ref != nil && ref.UID == ds.UID {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out
}

func revNames(revs []*appsv1.ControllerRevision) []string {
	var out []string
	for _, r := range revs {
		out = append(out, fmt.Sprintf("%s=%d", r.Name, r.Revision))
	}
	return out
}

// TestRollingUpdateMaxSurge: with maxSurge 1 and maxUnavailable 0 the new
// pod starts beside the old one and the old one goes once the new one is
// available: no node is ever without a ready pod, at most one has two.
// Rolling back to the first template renumbers its revision.
func TestRollingUpdateMaxSurge(t *testing.T) {
	e := start(t)
	e.runController()
	nodes := []string{"n1", "n2", "n3"}
	for _, n := range nodes {
		e.node(n, nil)
	}
	zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
	ds := e.createDS(dsOf("surge", func(ds *appsv1.DaemonSet) {
		ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &zero, MaxSurge: &one}
	}))
	e.waitPlaced(ds, "n1,n2,n3")
	firstHash := e.pods(ds)[0].Labels[daemonset.HashLabel]
	unavailable, doubled := e.rollout(ds, nodes, "docker.io/library/hello-container:v2")
	if unavailable != 0 || doubled != 1 {
		t.Errorf("at most %d nodes unavailable and %d with two pods during the surge rollout, want 0 and 1", unavailable, doubled)
	}
	// Back to v1: the first revision comes back as revision 3, the pods
	// get its hash again.
	unavailable, doubled = e.rollout(ds, nodes, "docker.io/library/hello-container:v1")
	if unavailable != 0 || doubled != 1 {
		t.Errorf("rollback: at most %d nodes unavailable and %d with two pods, want 0 and 1", unavailable, doubled)
	}
	revs := e.revisions(ds)
	if len(revs) != 2 || revs[1].Revision != 3 || revs[1].Labels[daemonset.HashLabel] != firstHash {
		t.Fatalf("revisions %v, want the first (hash %s) renumbered 3", revNames(revs), firstHash)
	}
	for _, p := range e.pods(ds) {
		if p.Labels[daemonset.HashLabel] != firstHash {
			t.Errorf("pod %s hash %s, want %s", p.Name, p.Labels[daemonset.HashLabel], firstHash)
		}
	}
}

// TestOnDelete: a template change replaces no pod until one is deleted;
// its replacement has the new template.
func TestOnDelete(t *testing.T) {
	e := start(t)
	e.runController()
	e.node("n1", nil)
	e.node("n2", nil)
	ds := e.createDS(dsOf("ondelete", func(ds *appsv1.DaemonSet) { ds.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType }))
	e.waitPlaced(ds, "n1,n2")
	before := e.pods(ds)
	updated := e.updateDS(ds.Name, func(d *appsv1.DaemonSet) {
		d.Spec.Template.Spec.Containers[0].Image = "docker.io/library/hello-container:v2"
	})
	storetest.Eventually(t, wait, func() error {
		st := e.getDS(ds.Name).Status
		if st.ObservedGeneration != updated.Generation || st.UpdatedNumberScheduled != 0 || st.NumberAvailable != 2 || len(e.revisions(ds)) != 2 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	// The sync of the new generation has run: no pod was replaced.
	if after := e.pods(ds); len(after) != 2 || after[0].UID != before[0].UID && after[0].UID != before[1].UID {
		t.Fatalf("pods replaced without a deletion")
	}
	if _, err := e.s.Delete(e.ctx, store.Pods, "default", before[0].Name, ""); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	storetest.Eventually(t, wait, func() error {
		st := e.getDS(ds.Name).Status
		if st.UpdatedNumberScheduled != 1 || st.NumberAvailable != 2 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	for _, p := range e.pods(ds) {
		if (p.Spec.NodeName == before[0].Spec.NodeName) != (p.Spec.Containers[0].Image == "docker.io/library/hello-container:v2") {
			t.Errorf("pod %s on %s has %s", p.Name, p.Spec.NodeName, p.Spec.Containers[0].Image)
		}
	}
}

// TestFailedPodReplaced: a failed daemon pod is deleted (FailedDaemonPod)
// and replaced.
func TestFailedPodReplaced(t *testing.T) {
	e := start(t)
	e.runController()
	e.node("n1", nil)
	ds := e.createDS(dsOf("flaky"))
	e.waitPlaced(ds, "n1")
	first := e.pods(ds)[0]
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := e.s.Get(e.ctx, store.Pods, "default", first.Name)
		if err != nil {
			return err
		}
		p := o.(*corev1.Pod)
		p.Status.Phase = corev1.PodFailed
		_, err = e.s.Update(e.ctx, store.Pods, p)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, wait, func() error {
		pods := e.pods(ds)
		if len(pods) != 1 || pods[0].UID == first.UID {
			return fmt.Errorf("%d pods, first still there", len(pods))
		}
		return nil
	})
	e.waitPlaced(ds, "n1")
}

// TestNoDuplicatesAfterRestart: a new controller (fresh informers, no
// expectations) adopts the state and creates no second pod on any node,
// while it keeps managing (a node added after the restart gets its pod).
func TestNoDuplicatesAfterRestart(t *testing.T) {
	e := start(t)
	stop := e.runController()
	for _, n := range []string{"n1", "n2", "n3"} {
		e.node(n, nil)
	}
	ds := e.createDS(dsOf("restart"))
	e.waitPlaced(ds, "n1,n2,n3")
	names := map[string]bool{}
	for _, p := range e.pods(ds) {
		names[p.Name] = true
	}
	stop()
	e.runController()
	e.runController() // two at once, as during a leader handover
	e.node("n4", nil)
	e.waitPlaced(ds, "n1,n2,n3,n4")
	updated := e.updateDS(ds.Name, func(d *appsv1.DaemonSet) {
		d.Spec.MinReadySeconds = 0
		d.Labels = map[string]string{"x": "y"}
		d.Spec.RevisionHistoryLimit = new(int32(5))
	})
	storetest.Eventually(t, wait, func() error {
		if st := e.getDS(ds.Name).Status; st.ObservedGeneration != updated.Generation {
			return fmt.Errorf("observed %d", st.ObservedGeneration)
		}
		return nil
	})
	// Two controllers at once may both create n4's pod (generateName, as
	// Kubernetes'); the excess one is deleted, so the set converges to one
	// pod per node.
	var pods []*corev1.Pod
	storetest.Eventually(t, wait, func() error {
		if pods = e.pods(ds); len(pods) != 4 {
			return fmt.Errorf("%d pods after restart, want 4", len(pods))
		}
		return nil
	})
	kept := 0
	for _, p := range pods {
		if names[p.Name] {
			kept++
		}
	}
	if kept != 3 {
		t.Fatalf("%d of the 3 pods kept across the restart", kept)
	}
	if revs := e.revisions(ds); len(revs) != 1 {
		t.Fatalf("revisions %v", revNames(revs))
	}
}
