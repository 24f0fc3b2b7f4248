package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The stand-in nodes replace hollow nodes until `orca-agent --hollow` is
// on main: the runner writes each Node (Ready, kubemark's capacity) and
// its Lease through the API as the admin and renews the Leases every
// leaseRenewInterval, as a kubelet does; the stand-in kubelet marks pods
// bound to them Running and Ready. No node agent code runs: figures
// measured so are marked "stand-in nodes".

// leaseRenewInterval is the kubelet's (and orca-agent's) renew period.
const leaseRenewInterval = 10 * time.Second

// nodeCapacity is kubemark's hollow node: 4 CPUs, 16Gi, 110 pods.
func nodeCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
}

// standInNodeName is the name of stand-in node i of a run.
func standInNodeName(i int) string { return fmt.Sprintf("bench-node-%05d", i) }

// standInNodes are n Nodes and their Leases kept alive by the runner.
type standInNodes struct {
	c      kubernetes.Interface
	names  []string
	mu     sync.Mutex
	leases map[string]*coordinationv1.Lease // mu
}

// createStandInNodes creates n Ready Nodes and their Leases with workers
// concurrent requests and starts renewing the Leases until ctx ends.
func createStandInNodes(ctx context.Context, c kubernetes.Interface, n, workers int) (*standInNodes, error) {
	s := &standInNodes{c: c, leases: map[string]*coordinationv1.Lease{}}
	for i := range n {
		s.names = append(s.names, standInNodeName(i))
	}
	// Renewing starts at once: creating thousands of nodes can take
	// longer than the node monitor grace period (40 s), and a node the
	// lifecycle controller marked Unknown has no kubelet to set it
	// Ready again.
	go s.renew(ctx)
	err := parallel(ctx, n, workers, func(ctx context.Context, i int) error {
		name := s.names[i]
		now := metav1.Now()
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
				"bench.orca.dev/stand-in": "true",
				// The runtimes a node agent advertises (RuntimeClass scheduling).
				nodeapi.RuntimeLabel(nodeapi.HandlerContainerd): "true", nodeapi.RuntimeLabel(nodeapi.HandlerWasm): "true"}},
			Status: corev1.NodeStatus{
				Capacity: nodeCapacity(), Allocatable: nodeCapacity(),
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
					Reason: "KubeletReady", Message: "stand-in node of the bench runner", LastHeartbeatTime: now, LastTransitionTime: now}},
				Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: name}},
				NodeInfo:  corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "v1.33.0-bench"},
			},
		}
		var created *corev1.Node
		err := retry(ctx, func() (err error) {
			created, err = c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) { // an earlier attempt's answer was lost
				created, err = c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("create node %s: %w", name, err)
		}
		if !nodeReady(created) { // status dropped on create, as Kubernetes' strategy may
			created.Status = node.Status
			if err := retry(ctx, func() error {
				_, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
				return err
			}); err != nil {
				return fmt.Errorf("update node %s status: %w", name, err)
			}
		}
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To(int32(40)),
				RenewTime: &metav1.MicroTime{Time: time.Now()}},
		}
		var got *coordinationv1.Lease
		err = retry(ctx, func() (err error) {
			got, err = c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, l, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				got, err = c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("create lease %s: %w", name, err)
		}
		s.mu.Lock()
		s.leases[name] = got
		s.mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// readyNodes counts the nodes whose Ready condition is True.
func readyNodes(ctx context.Context, c kubernetes.Interface) (int, error) {
	l, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	ready := 0
	for i := range l.Items {
		if nodeReady(&l.Items[i]) {
			ready++
		}
	}
	return ready, nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// renew renews every Lease once per leaseRenewInterval, spread evenly
// over the interval (n/10 updates per second), until ctx ends.
func (s *standInNodes) renew(ctx context.Context) {
	lim := rate.NewLimiter(rate.Limit(float64(len(s.names))/leaseRenewInterval.Seconds()), 1)
	for i := 0; ctx.Err() == nil; i = (i + 1) % len(s.names) {
		if lim.Wait(ctx) != nil {
			return
		}
		name := s.names[i]
		s.mu.Lock()
		l := s.leases[name].DeepCopy() // nil: not created yet
		s.mu.Unlock()
		if l == nil {
			continue
		}
		go func() {
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			got, err := s.c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				got, err = s.c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			}
			if err == nil {
				s.mu.Lock()
				s.leases[name] = got
				s.mu.Unlock()
			}
		}()
	}
}

// waitNodesReady polls until n Ready nodes are listed (every 2 s: a list
// of 5,000 nodes is not free).
func waitNodesReady(ctx context.Context, c kubernetes.Interface, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ready, err := readyNodes(ctx, c)
		if err == nil && ready >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d nodes Ready after %s (last error %v)", ready, n, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// standInKubelet marks every pod of namespace ns that is bound (to any
// node) Running and Ready, as a kubelet with an instant runtime would,
// with workers concurrent status updates. It returns when ctx ends.
func standInKubelet(ctx context.Context, c kubernetes.Interface, ns string, workers int) {
	work := make(chan *corev1.Pod, 100000)
	var done sync.Map
	for range workers {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case p := <-work:
					markRunning(ctx, c, p)
				}
			}
		}()
	}
	_ = watchPods(ctx, c, ns, func(_ watch.EventType, p *corev1.Pod, _ time.Time) {
		if p.Spec.NodeName == "" || podReady(p) {
			return
		}
		if _, seen := done.LoadOrStore(p.Name, true); seen {
			return
		}
		work <- p
	}, nil)
}

// markRunning writes p's status as the kubelet does once its containers
// run and are ready (a conflict re-reads the pod and tries again).
func markRunning(ctx context.Context, c kubernetes.Interface, p *corev1.Pod) {
	for attempt := 0; attempt < 5 && ctx.Err() == nil; attempt++ {
		now := metav1.Now()
		p = p.DeepCopy()
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = &now
		p.Status.PodIP = "10.244.0.1"
		p.Status.HostIP = "127.0.0.1"
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		p.Status.ContainerStatuses = nil
		for _, ct := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: ct.Name, Image: ct.Image, ImageID: ct.Image, Ready: true, Started: ptr.To(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
		}
		_, err := c.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return
		}
		if p, err = c.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); err != nil {
			return
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// listedEvent is the event type watchPods gives the objects of its
// initial list.
const listedEvent watch.EventType = "LISTED"

// watchPods lists namespace ns and then watches it from the list's
// resourceVersion, calling fn with each event (objects of the list as
// listedEvent) and the time it was received, until ctx ends; a watch the
// server ends is resumed from the last resourceVersion seen. listed, when
// not nil, is closed once the list's objects were given to fn.
func watchPods(ctx context.Context, c kubernetes.Interface, ns string, fn func(watch.EventType, *corev1.Pod, time.Time), listed chan<- struct{}) error {
	var l *corev1.PodList
	err := retry(ctx, func() (err error) {
		l, err = c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err
	})
	if err != nil {
		return err
	}
	now := time.Now()
	for i := range l.Items {
		fn(listedEvent, &l.Items[i], now)
	}
	if listed != nil {
		close(listed)
	}
	rv := l.ResourceVersion
	for ctx.Err() == nil {
		w, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch pods in %s: %w", ns, err)
		}
		for ev := range w.ResultChan() {
			t := time.Now()
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue // Status of an ERROR event
			}
			rv = p.ResourceVersion
			if ev.Type == watch.Bookmark {
				continue
			}
			fn(ev.Type, p, t)
		}
		w.Stop()
	}
	return nil
}

// parallel calls fn(i) for i in [0, n) from workers goroutines and returns
// the first error (the rest of the calls are then skipped).
func parallel(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && err != context.Canceled {
		return err
	}
	return nil
}

// retry calls fn up to 5 times while it fails (a 429 of the in-flight
// limits, a connection the loaded server dropped), waiting a little
// longer each time; it returns the last error.
func retry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		if err = fn(); err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
		}
	}
	return err
}
