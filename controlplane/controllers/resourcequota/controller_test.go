package resourcequota

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func pod(name, cpu string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "x",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}}}
}

// TestUsageFollowsObjects checks status.hard follows spec.hard and
// status.used counts the namespace's pods (active only) and ConfigMaps,
// and is released when a pod ends, when it is deleted and when a
// ConfigMap goes: what admission charges is given back.
func TestUsageFollowsObjects(t *testing.T) {
	s := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quotas, pods, cms := store.NewInformer(s, core.ResourceQuotas), store.NewInformer(s, store.Pods), store.NewInformer(s, store.ConfigMaps)
	c := New(s, builtin.New(), quotas, pods, []*store.Informer{cms}, time.Hour)
	for _, inf := range []*store.Informer{quotas, pods, cms} {
		go inf.Run(ctx)
		inf.WaitForSync(ctx)
	}
	go c.Run(ctx, 1)

	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "compute"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("5"),
			corev1.ResourceRequestsCPU: resource.MustParse("2"), "count/configmaps": resource.MustParse("3")}}}
	if _, err := s.Create(ctx, core.ResourceQuotas, q); err != nil {
		t.Fatal(err)
	}
	other := pod("elsewhere", "1")
	other.Namespace = "other"
	for _, p := range []*corev1.Pod{pod("a", "500m"), pod("b", "250m"), other} {
		if _, err := s.Create(ctx, store.Pods, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create(ctx, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cm"}}); err != nil {
		t.Fatal(err)
	}
	expect := func(pods, cpu, configmaps string) {
		t.Helper()
		storetest.Eventually(t, 10*time.Second, func() error {
			o, err := s.Get(ctx, core.ResourceQuotas, "default", "compute")
			if err != nil {
				return err
			}
			st := o.(*corev1.ResourceQuota).Status
			if h := st.Hard[corev1.ResourcePods]; h.String() != "5" {
				return fmt.Errorf("status.hard %v", st.Hard)
			}
			u := st.Used
			got := fmt.Sprintf("pods=%s cpu=%s configmaps=%s", u.Pods().String(), u.Name(corev1.ResourceRequestsCPU, resource.DecimalSI).String(), u.Name("count/configmaps", resource.DecimalSI).String())
			if want := fmt.Sprintf("pods=%s cpu=%s configmaps=%s", pods, cpu, configmaps); got != want {
				return fmt.Errorf("status.used %s, want %s", got, want)
			}
			return nil
		})
	}
	expect("2", "750m", "1")

	// A pod that ends no longer counts; a deleted one neither.
	if _, err := s.GuaranteedUpdate(ctx, store.Pods, "default", "a", nil, func(o store.Object) (store.Object, error) {
		o.(*corev1.Pod).Status.Phase = corev1.PodSucceeded
		return o, nil
	}); err != nil {
		t.Fatal(err)
	}
	expect("1", "250m", "1")
	if _, err := s.Delete(ctx, store.Pods, "default", "b", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, store.ConfigMaps, "default", "cm", ""); err != nil {
		t.Fatal(err)
	}
	expect("0", "0", "0")
}
