package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestStopsUnderLoad cancels orca-server's run while the scheduler has
// thousands of Pending pods to try on every node and the ReplicaSet
// controller is creating thousands more: run must return within 20 s (a
// deadlock guard, not a timing goal: it takes well under a second; the
// queues used to be drained, which took minutes).
func TestStopsUnderLoad(t *testing.T) {
	const nodes, pending, replicas = 1000, 10000, 5000
	dataDir := t.TempDir()
	api, client, natsURL, stop := server(t, "--data-dir", dataDir)
	// Nodes and pending pods are written through the store (as the
	// controllers write), which takes them faster than the API.
	nc, err := nats.Connect(natsURL, append(controlPlaneNATS(t, dataDir), nats.RootCAs(filepath.Join(dataDir, "tls", "ca.crt")))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st, err := store.New(nc, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg := builtin.New()
	create := func(r store.Resource, obj store.Object) {
		if _, err := reg.Create(context.Background(), st, r, obj); err != nil {
			t.Errorf("create %s %s: %v", r.Kind, obj.GetName(), err)
		}
	}
	post := func(path string, obj any) {
		t.Helper()
		b, err := json.Marshal(obj)
		if err != nil {
			t.Error(err)
			return
		}
		for {
			resp, err := client.Post(api+path, "application/json", bytes.NewReader(b))
			if err != nil {
				t.Errorf("POST %s: %v", path, err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusCreated:
				return
			case http.StatusTooManyRequests:
				continue
			}
			t.Errorf("POST %s: %d %s", path, resp.StatusCode, body)
			return
		}
	}
	parallel := func(n int, f func(i int)) {
		var wg sync.WaitGroup
		work := make(chan int)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					f(i)
				}
			}()
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
	}
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
	parallel(nodes, func(i int) {
		create(store.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("node-", i)},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity,
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}}})
	})
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app:v1",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5")}}}}} // fits no node
	parallel(pending, func(i int) {
		create(store.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("pending-", i)}, Spec: spec})
	})
	r := int32(replicas)
	post("/apis/apps/v1/namespaces/default/deployments", &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "load"},
		Spec: appsv1.DeploymentSpec{Replicas: &r, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "load"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "load"}}, Spec: spec}}})
	if t.Failed() {
		t.FailNow()
	}
	// Busy: the ReplicaSet controller has created a good part of its pods
	// (it creates them in growing batches, as Kubernetes' slow start).
	storetest.Eventually(t, 60*time.Second, func() error {
		resp, err := client.Get(api + "/api/v1/namespaces/default/pods?limit=1&labelSelector=app%3Dload")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var list corev1.PodList
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			return err
		}
		n := int64(len(list.Items))
		if list.RemainingItemCount != nil {
			n += *list.RemainingItemCount
		}
		if n < 500 {
			return fmt.Errorf("%d pods of the deployment so far", n)
		}
		return nil
	})
	start := time.Now()
	stop() // fails the test when run has not returned within 20 s
	t.Logf("orca-server stopped %v after its context ended", time.Since(start).Round(time.Millisecond))
}
