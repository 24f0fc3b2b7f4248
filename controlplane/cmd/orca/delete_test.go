package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/orca-edge/orca/controlplane/apiserver"
	"github.com/orca-edge/orca/controlplane/controllers"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestDeleteWaitsForDependents: `orca delete -f --wait` deletes the
// example's Deployment in the foreground, so it returns once its
// ReplicaSet (and pods) are gone too, and says "not found" the second time.
func TestDeleteWaitsForDependents(t *testing.T) {
	st := storetest.NewStore(t)
	srv := serveAPI(t, apiserver.Config{Store: st})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cm, err := controllers.New(controllers.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	go cm.Run(ctx)
	exec := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := newRootCommand(&out, &out)
		root.SetArgs(append([]string{"--kubeconfig", srv.Kubeconfig}, args...))
		err := root.Execute()
		return out.String(), err
	}
	file := filepath.Join("..", "..", "..", "examples", "hello-container", "app.yaml")
	if out, err := exec("apply", "-f", file); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	storetest.Eventually(t, 10*time.Second, func() error { // the controller made its ReplicaSet
		rs, _, err := st.List(ctx, store.ReplicaSets, "default")
		if err == nil && len(rs) == 0 {
			return apierrors.NewNotFound(store.ReplicaSets.GroupResource(), "hello-container-*")
		}
		return err
	})
	out, err := exec("delete", "-f", file, "--wait", "20s")
	if err != nil || !strings.Contains(out, "deployment/hello-container deleted") || !strings.Contains(out, "service/hello-container deleted") {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	rs, _, err := st.List(ctx, store.ReplicaSets, "default")
	if err != nil || len(rs) != 0 {
		t.Errorf("after delete --wait: %d ReplicaSets left (%v): foreground deletion removes dependents first", len(rs), err)
	}
	if out, err := exec("delete", "-f", file); err != nil || !strings.Contains(out, "deployment/hello-container not found") {
		t.Errorf("second delete: %v\n%s", err, out)
	}
}
