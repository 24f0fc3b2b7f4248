package nodeagent

import (
	"context"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestStoreAPI checks the writes the agent makes through the store-backed
// API: create fills uid and creationTimestamp, Update keeps the status and
// UpdateStatus the spec, stale resourceVersions conflict, and delete
// preconditions hold.
func TestStoreAPI(t *testing.T) {
	ctx := context.Background()
	api := NewStoreAPI(storetest.NewStore(t))
	created, err := api.Create(ctx, store.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodPending}})
	if err != nil {
		t.Fatal(err)
	}
	if created.GetUID() == "" || created.GetCreationTimestamp().Time.IsZero() || created.GetResourceVersion() == "" {
		t.Fatalf("created %+v: want uid, creationTimestamp and resourceVersion", created)
	}

	// A status update takes only the status.
	p := created.(*corev1.Pod).DeepCopy()
	p.Status.Phase = corev1.PodRunning
	p.Spec.NodeName = "other"
	st, err := api.UpdateStatus(ctx, store.Pods, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.(*corev1.Pod); got.Status.Phase != corev1.PodRunning || got.Spec.NodeName != "n1" {
		t.Fatalf("after UpdateStatus: phase %s node %s; want Running on n1", got.Status.Phase, got.Spec.NodeName)
	}
	// The old resourceVersion is stale now.
	if _, err := api.UpdateStatus(ctx, store.Pods, p); !apierrors.IsConflict(err) {
		t.Fatalf("UpdateStatus with a stale resourceVersion: %v; want Conflict", err)
	}
	// A main update keeps the status.
	m := st.(*corev1.Pod).DeepCopy()
	m.Labels = map[string]string{"a": "b"}
	m.Status.Phase = corev1.PodFailed
	up, err := api.Update(ctx, store.Pods, m)
	if err != nil {
		t.Fatal(err)
	}
	if got := up.(*corev1.Pod); got.Labels["a"] != "b" || got.Status.Phase != corev1.PodRunning {
		t.Fatalf("after Update: labels %v phase %s; want a=b and Running", got.Labels, got.Status.Phase)
	}
	if _, err := api.UpdateStatus(ctx, store.Events, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "e", ResourceVersion: "1"}}); !apierrors.IsBadRequest(err) {
		t.Fatalf("UpdateStatus of an Event: %v; want BadRequest", err)
	}

	// Deletes honour the uid precondition.
	other := types.UID("not-the-uid")
	if err := api.Delete(ctx, store.Pods, "default", "web", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &other}}); !apierrors.IsConflict(err) {
		t.Fatalf("delete with a wrong uid: %v; want Conflict", err)
	}
	uid := created.GetUID()
	if err := api.Delete(ctx, store.Pods, "default", "web", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Get(ctx, store.Pods, "default", "web"); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: %v; want NotFound", err)
	}
	if err := api.Delete(ctx, store.Pods, "default", "web", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("second delete: %v; want NotFound", err)
	}

	// CreateToken needs a token function.
	if _, err := api.CreateToken(ctx, "default", "default", &authenticationv1.TokenRequest{}); !apierrors.IsMethodNotSupported(err) {
		t.Fatalf("CreateToken without Tokens: %v; want MethodNotAllowed", err)
	}
	api.Tokens = func(_ context.Context, ns, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
		out := req.DeepCopy()
		out.Status.Token = ns + "/" + sa
		return out, nil
	}
	tr, err := api.CreateToken(ctx, "default", "web", &authenticationv1.TokenRequest{})
	if err != nil || tr.Status.Token != "default/web" {
		t.Fatalf("CreateToken: %v, %+v", err, tr)
	}
}
