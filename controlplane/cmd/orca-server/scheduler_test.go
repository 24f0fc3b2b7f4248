package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestDisableScheduler starts orca-server with --disable-scheduler, a
// Ready node and a pod: the pod stays unbound while the ReplicaSet
// controller of the same process creates (and leaves unbound) a pod of
// its own, which it does after the pod was written; then a server on the
// same data directory without the flag binds both.
func TestDisableScheduler(t *testing.T) {
	dataDir := t.TempDir()
	// No Lease renews the node: a long grace keeps it Ready.
	args := []string{"--data-dir", dataDir, "--node-monitor-grace-period", "1h"}
	connect := func(natsURL string) *store.Store {
		t.Helper()
		nc, err := nats.Connect(natsURL, append(controlPlaneNATS(t, dataDir), nats.RootCAs(filepath.Join(dataDir, "tls", "ca.crt")))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		st, err := store.New(nc, store.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	ctx := context.Background()
	reg := builtin.New()
	_, _, natsURL, stop := server(t, append(args, "--disable-scheduler")...)
	st := connect(natsURL)
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
	if _, err := reg.Create(ctx, st, store.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0",
		Labels: map[string]string{nodeapi.RuntimeLabel(nodeapi.HandlerContainerd): "true"}},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}}}); err != nil {
		t.Fatal(err)
	}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app:v1"}}}
	if _, err := reg.Create(ctx, st, store.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	labels := map[string]string{"app": "rs"}
	if _, err := reg.Create(ctx, st, store.ReplicaSets, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "rs"},
		Spec: appsv1.ReplicaSetSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}}}); err != nil {
		t.Fatal(err)
	}
	// check lists the default namespace's pods and fails unless want
	// pods exist and bound says whether each is bound.
	check := func(st *store.Store, want int, bound bool) error {
		objs, _, err := st.List(ctx, store.Pods, "default")
		if err != nil {
			return err
		}
		if len(objs) != want {
			return fmt.Errorf("%d pods, want %d", len(objs), want)
		}
		for _, o := range objs {
			if p := o.(*corev1.Pod); (p.Spec.NodeName != "") != bound {
				return fmt.Errorf("pod %s: nodeName %q, conditions %v", p.Name, p.Spec.NodeName, p.Status.Conditions)
			}
		}
		return nil
	}
	storetest.Eventually(t, 30*time.Second, func() error {
		objs, _, err := st.List(ctx, store.Pods, "default")
		if err != nil {
			return err
		}
		for _, o := range objs {
			if p := o.(*corev1.Pod); p.Spec.NodeName != "" {
				t.Fatalf("pod %s was bound to %s with --disable-scheduler", p.Name, p.Spec.NodeName)
			}
		}
		if len(objs) < 2 {
			return fmt.Errorf("%d pods: the ReplicaSet's is not there yet", len(objs))
		}
		return nil
	})
	if err := check(st, 2, false); err != nil {
		t.Fatal(err)
	}
	stop()

	_, _, natsURL, _ = server(t, args...)
	st = connect(natsURL)
	storetest.Eventually(t, 30*time.Second, func() error { return check(st, 2, true) })
}
