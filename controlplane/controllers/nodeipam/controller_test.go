package nodeipam

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func TestParseRange(t *testing.T) {
	for _, bad := range []struct {
		cidr string
		mask int
	}{{"10.42.0.0", 24}, {"fd00::/64", 80}, {"10.42.0.0/16", 15}, {"10.42.0.0/16", 31}, {"10.0.0.0/8", 25}} {
		if _, err := ParseRange(bad.cidr, bad.mask); err == nil {
			t.Errorf("ParseRange(%q, %d) accepted", bad.cidr, bad.mask)
		}
	}
	r, err := ParseRange("10.42.7.9/16", 24) // host bits are masked
	if err != nil {
		t.Fatal(err)
	}
	if r.Size() != 256 || r.Subnet(0).String() != "10.42.0.0/24" || r.Subnet(255).String() != "10.42.255.0/24" {
		t.Errorf("size %d, subnets %s %s", r.Size(), r.Subnet(0), r.Subnet(255))
	}
	for _, c := range []struct {
		p      string
		lo, hi int
	}{
		{"10.42.3.0/24", 3, 4}, {"10.42.3.128/25", 3, 4}, {"10.42.4.0/22", 4, 8},
		{"10.0.0.0/8", 0, 256}, {"10.43.0.0/24", 0, 0}, {"fd00::/64", 0, 0},
	} {
		lo, hi := r.covered(netip.MustParsePrefix(c.p))
		if lo != c.lo || hi != c.hi {
			t.Errorf("covered(%s) = [%d,%d), want [%d,%d)", c.p, lo, hi, c.lo, c.hi)
		}
	}
}

// run starts a controller over its own Nodes informer until the returned
// stop is called (or the test ends).
func run(t *testing.T, s *store.Store, rng Range) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	nodes := store.NewInformer(s, store.Nodes)
	c := New(s, builtin.New(), nodes, rng)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); nodes.Run(ctx) }()
	if !nodes.WaitForSync(ctx) {
		t.Fatal("nodes informer did not sync")
	}
	go func() { defer wg.Done(); c.Run(ctx, 2) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

func createNode(t *testing.T, s *store.Store, name, podCIDR string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: podCIDR}}
	if podCIDR != "" {
		n.Spec.PodCIDRs = []string{podCIDR}
	}
	if _, err := s.Create(context.Background(), store.Nodes, n); err != nil {
		t.Fatal(err)
	}
}

func deleteNode(t *testing.T, s *store.Store, name string) {
	t.Helper()
	if _, err := s.Delete(context.Background(), store.Nodes, "", name, ""); err != nil {
		t.Fatal(err)
	}
}

// cidrs returns "name=podCIDR" of every Node, sorted, failing unless
// podCIDRs is [podCIDR] wherever podCIDR is set.
func cidrs(s *store.Store) (map[string]string, error) {
	objs, _, err := s.List(context.Background(), store.Nodes, "")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, o := range objs {
		n := o.(*corev1.Node)
		if n.Spec.PodCIDR != "" && (len(n.Spec.PodCIDRs) != 1 || n.Spec.PodCIDRs[0] != n.Spec.PodCIDR) {
			return nil, fmt.Errorf("node %s: podCIDR %q, podCIDRs %q", n.Name, n.Spec.PodCIDR, n.Spec.PodCIDRs)
		}
		out[n.Name] = n.Spec.PodCIDR
	}
	return out, nil
}

// waitCIDRs waits until the nodes' podCIDRs are want (node name to CIDR).
func waitCIDRs(t *testing.T, s *store.Store, want map[string]string) {
	t.Helper()
	storetest.Eventually(t, 10*time.Second, func() error {
		got, err := cidrs(s)
		if err != nil {
			return err
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("pod CIDRs %v, want %v", got, want)
		}
		return nil
	})
}

func TestAssignsFreesAndSurvivesRestart(t *testing.T) {
	s := storetest.NewStore(t)
	rng, err := ParseRange("10.42.0.0/22", 24) // four node subnets
	if err != nil {
		t.Fatal(err)
	}
	createNode(t, s, "manual", "10.42.1.0/24") // set by hand (agent --pod-cidr): kept and skipped
	createNode(t, s, "elsewhere", "192.168.7.0/24")
	// podCIDRs alone: podCIDR becomes its first.
	if _, err := s.Create(context.Background(), store.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cidrs-only"},
		Spec: corev1.NodeSpec{PodCIDRs: []string{"172.16.0.0/24"}}}); err != nil {
		t.Fatal(err)
	}
	stop := run(t, s, rng)
	createNode(t, s, "a", "")
	waitCIDRs(t, s, map[string]string{"manual": "10.42.1.0/24", "elsewhere": "192.168.7.0/24", "cidrs-only": "172.16.0.0/24", "a": "10.42.0.0/24"})
	createNode(t, s, "b", "")
	waitCIDRs(t, s, map[string]string{"manual": "10.42.1.0/24", "elsewhere": "192.168.7.0/24", "cidrs-only": "172.16.0.0/24", "a": "10.42.0.0/24", "b": "10.42.2.0/24"})

	// A new controller knows the used subnets from the Nodes alone.
	stop()
	run(t, s, rng)
	createNode(t, s, "c", "")
	waitCIDRs(t, s, map[string]string{"manual": "10.42.1.0/24", "elsewhere": "192.168.7.0/24", "cidrs-only": "172.16.0.0/24", "a": "10.42.0.0/24", "b": "10.42.2.0/24", "c": "10.42.3.0/24"})

	// Full: d waits with a Warning Event, and gets a's subnet once a is gone.
	createNode(t, s, "d", "")
	storetest.Eventually(t, 10*time.Second, func() error {
		evs, _, err := s.List(context.Background(), store.Events, metav1.NamespaceDefault)
		if err != nil {
			return err
		}
		for _, o := range evs {
			ev := o.(*corev1.Event)
			if ev.InvolvedObject.Kind == "Node" && ev.InvolvedObject.Name == "d" && ev.Reason == "CIDRNotAvailable" && ev.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return fmt.Errorf("no CIDRNotAvailable event for node d in %d events", len(evs))
	})
	if got, _ := cidrs(s); got["d"] != "" {
		t.Fatalf("node d got %q from a full range", got["d"])
	}
	deleteNode(t, s, "a")
	waitCIDRs(t, s, map[string]string{"manual": "10.42.1.0/24", "elsewhere": "192.168.7.0/24", "cidrs-only": "172.16.0.0/24", "b": "10.42.2.0/24", "c": "10.42.3.0/24", "d": "10.42.0.0/24"})
}

func TestConcurrentNodesGetDistinctSubnets(t *testing.T) {
	s := storetest.NewStore(t)
	rng, err := ParseRange("10.42.0.0/16", 24)
	if err != nil {
		t.Fatal(err)
	}
	run(t, s, rng)
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); createNode(t, s, fmt.Sprintf("edge-%02d", i), "") }()
	}
	wg.Wait()
	storetest.Eventually(t, 20*time.Second, func() error {
		got, err := cidrs(s)
		if err != nil {
			return err
		}
		seen := map[string]string{}
		var all []string
		for name, c := range got {
			if c == "" {
				return fmt.Errorf("node %s has no pod CIDR yet", name)
			}
			if other, dup := seen[c]; dup {
				t.Fatalf("nodes %s and %s share %s", name, other, c)
			}
			seen[c] = name
			all = append(all, c)
		}
		sort.Strings(all)
		if len(all) != n || !strings.HasPrefix(all[0], "10.42.") {
			return fmt.Errorf("%d pod CIDRs: %v", len(all), all)
		}
		return nil
	})
	// Lowest first: exactly the subnets 0..n-1.
	got, _ := cidrs(s)
	want := map[string]bool{}
	for i := range n {
		want[rng.Subnet(i).String()] = true
	}
	for name, c := range got {
		if !want[c] {
			t.Errorf("node %s got %s, outside the first %d subnets", name, c, n)
		}
	}
}
