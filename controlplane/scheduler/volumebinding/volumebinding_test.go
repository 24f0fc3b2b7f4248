package volumebinding_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/controllers/persistentvolume"
	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/registry/storage"
	"github.com/orca-edge/orca/controlplane/scheduler"
	"github.com/orca-edge/orca/controlplane/scheduler/framework"
	"github.com/orca-edge/orca/controlplane/scheduler/volumebinding"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func pvcOf(name, class, volume string, selected string) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName: &class, VolumeName: volume,
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}}
	if selected != "" {
		c.Annotations = map[string]string{core.AnnSelectedNode: selected}
	}
	return c
}

func pinned(name, class, node string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: class,
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")},
		PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/" + name}},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}},
	}}
}

func class(name, provisioner string, mode storagev1.VolumeBindingMode) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &mode}
}

func podWith(claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "docker.io/library/hello-container:v1"}}}}
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return p
}

// TestFilter checks PreFilter and Filter over claims, volumes and classes
// held in maps, with kube-scheduler's messages.
func TestFilter(t *testing.T) {
	wffc, now := storagev1.VolumeBindingWaitForFirstConsumer, storagev1.VolumeBindingImmediate
	claims := map[string]*corev1.PersistentVolumeClaim{
		"bound-a":    pvcOf("bound-a", "manual", "pv-a", ""),
		"bound-gone": pvcOf("bound-gone", "manual", "pv-missing", ""),
		"wait":       pvcOf("wait", "local-path", "", ""),
		"wait-b":     pvcOf("wait-b", "local-path", "", "b"),
		"static":     pvcOf("static", "static-only", "", ""),
		"immediate":  pvcOf("immediate", "fast", "", ""),
		"noclass":    pvcOf("noclass", "", "", ""),
	}
	deleting := pvcOf("deleting", "local-path", "", "")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	claims["deleting"] = deleting
	volumes := map[string]*corev1.PersistentVolume{"pv-a": pinned("pv-a", "manual", "a"), "pv-static-b": pinned("pv-static-b", "static-only", "b")}
	classes := map[string]*storagev1.StorageClass{
		"local-path":  class("local-path", persistentvolume.RancherLocalPath, wffc),
		"static-only": class("static-only", "kubernetes.io/no-provisioner", wffc),
		"fast":        class("fast", "example.com/fast", now),
	}
	l := volumebinding.Listers{
		Claim:  func(_, n string) (*corev1.PersistentVolumeClaim, bool) { c, ok := claims[n]; return c, ok },
		Volume: func(n string) (*corev1.PersistentVolume, bool) { v, ok := volumes[n]; return v, ok },
		Volumes: func() []*corev1.PersistentVolume {
			var out []*corev1.PersistentVolume
			for _, v := range volumes {
				out = append(out, v)
			}
			return out
		},
		Class: func(n string) (*storagev1.StorageClass, bool) { c, ok := classes[n]; return c, ok },
	}
	p := volumebinding.New(l, nil, 0)
	node := func(name string) *framework.NodeInfo {
		return framework.NewNodeInfo(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}})
	}
	for _, tc := range []struct {
		name      string
		claims    []string
		preFilter string            // "" passes; "skip"
		nodes     map[string]string // node -> reason ("" fits)
	}{
		{"no claims", nil, "skip", nil},
		{"missing claim", []string{"nope"}, `persistentvolumeclaim "nope" not found`, nil},
		{"claim being deleted", []string{"deleting"}, `persistentvolumeclaim "deleting" is being deleted`, nil},
		{"unbound immediate", []string{"immediate"}, volumebinding.ErrReasonUnboundImmediate, nil},
		{"unbound without class", []string{"noclass"}, volumebinding.ErrReasonUnboundImmediate, nil},
		{"bound to a missing volume", []string{"bound-gone"}, volumebinding.ErrReasonBoundToMissingVolume, nil},
		{"bound volume pins node a", []string{"bound-a"}, "", map[string]string{"a": "", "b": volumebinding.ErrReasonNodeConflict}},
		{"wait for first consumer: anywhere", []string{"wait"}, "", map[string]string{"a": "", "b": ""}},
		{"selected node b", []string{"wait-b"}, "", map[string]string{"a": volumebinding.ErrReasonBindConflict, "b": ""}},
		{"no provisioner: only where a volume is", []string{"static"}, "", map[string]string{"a": volumebinding.ErrReasonBindConflict, "b": ""}},
		{"both", []string{"bound-a", "static"}, "", map[string]string{"a": volumebinding.ErrReasonBindConflict, "b": volumebinding.ErrReasonNodeConflict}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := framework.ContextWithCycleState(context.Background(), framework.NewCycleState())
			pod := podWith(tc.claims...)
			_, st := p.PreFilter(ctx, pod)
			switch {
			case tc.preFilter == "skip":
				if st.Code() != framework.Skip {
					t.Fatalf("PreFilter: %v %q, want Skip", st.Code(), st.Message())
				}
				return
			case tc.preFilter != "":
				if st.Code() != framework.Unschedulable || st.Message() != tc.preFilter {
					t.Fatalf("PreFilter: %v %q, want %q", st.Code(), st.Message(), tc.preFilter)
				}
				return
			case !st.IsSuccess():
				t.Fatalf("PreFilter: %v %q", st.Code(), st.Message())
			}
			for n, want := range tc.nodes {
				// Within the cycle and standalone alike.
				for _, c := range []context.Context{ctx, context.Background()} {
					if got := p.Filter(c, pod, node(n)).Message(); got != want {
						t.Errorf("node %s: %q, want %q", n, got, want)
					}
				}
			}
		})
	}
}

// TestScheduleWithClaim runs the scheduler and the PV controller on a
// real store: a pod whose claim is of the default WaitForFirstConsumer
// class is bound to a node only after its claim was given that node,
// provisioned there and Bound; a second pod of the same claim goes to
// the same node (the PV's node affinity); a pod of an unbound Immediate
// claim stays Pending with kube-scheduler's message.
func TestScheduleWithClaim(t *testing.T) {
	s := storetest.NewStore(t)
	reg := builtin.New()
	ctx := context.Background()
	inf := store.NewSharedInformers(s)
	pv := persistentvolume.New(s, reg, inf.For(core.PersistentVolumeClaims), inf.For(core.PersistentVolumes), inf.For(storage.StorageClasses),
		inf.For(store.Pods), inf.For(store.Nodes), persistentvolume.Config{DefaultLocalStoragePath: "/var/lib/orca/storage",
			DeleteVolume: func(context.Context, string, string, string) error { return nil }})
	sched, err := scheduler.New(scheduler.Config{Store: s, RetryInterval: time.Hour, Pods: inf.For(store.Pods), Nodes: inf.For(store.Nodes),
		RuntimeClasses: inf.For(store.RuntimeClasses), PersistentVolumeClaims: inf.For(core.PersistentVolumeClaims),
		PersistentVolumes: inf.For(core.PersistentVolumes), StorageClasses: inf.For(storage.StorageClasses)})
	if err != nil {
		t.Fatal(err)
	}
	storetest.RunUntilCleanup(t, func(ctx context.Context) error {
		inf.Start(ctx)
		go pv.Run(ctx, 2)
		err := sched.Run(ctx)
		inf.Wait()
		return err
	})
	for _, n := range []string{"edge-1", "edge-2"} {
		res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("2Gi"), corev1.ResourcePods: resource.MustParse("20")}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{corev1.LabelHostname: n, nodeapi.RuntimeLabel(nodeapi.HandlerContainerd): "true"}},
			Status: corev1.NodeStatus{Capacity: res, Allocatable: res, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		if _, err := s.Create(ctx, store.Nodes, node); err != nil {
			t.Fatal(err)
		}
	}
	storetest.Eventually(t, 20*time.Second, func() error {
		_, err := s.Get(ctx, storage.StorageClasses, "", persistentvolume.DefaultClassName)
		return err
	})
	create := func(r store.Resource, obj store.Object) {
		t.Helper()
		if _, err := reg.Create(ctx, s, r, obj); err != nil {
			t.Fatalf("create %s: %v", obj.GetName(), err)
		}
	}
	create(core.PersistentVolumeClaims, pvcOf("data", persistentvolume.DefaultClassName, "", ""))
	pod := podWith("data")
	pod.Spec.SchedulerName = scheduler.DefaultSchedulerName
	create(store.Pods, pod)
	var node string
	storetest.Eventually(t, 20*time.Second, func() error {
		o, err := s.Get(ctx, store.Pods, "default", "web")
		if err != nil {
			return err
		}
		if node = o.(*corev1.Pod).Spec.NodeName; node == "" {
			return fmt.Errorf("pod not bound yet")
		}
		return nil
	})
	// Bound only after the claim was: it names the node, its volume is pinned there.
	o, err := s.Get(ctx, core.PersistentVolumeClaims, "default", "data")
	if err != nil {
		t.Fatal(err)
	}
	claim := o.(*corev1.PersistentVolumeClaim)
	if claim.Annotations[core.AnnSelectedNode] != node || claim.Status.Phase != corev1.ClaimBound || claim.Spec.VolumeName != persistentvolume.VolumeName(claim) {
		t.Fatalf("claim when the pod was bound to %s: annotations %v phase %s volume %q", node, claim.Annotations, claim.Status.Phase, claim.Spec.VolumeName)
	}
	vo, err := s.Get(ctx, core.PersistentVolumes, "", claim.Spec.VolumeName)
	if err != nil {
		t.Fatal(err)
	}
	if vals := vo.(*corev1.PersistentVolume).Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values; len(vals) != 1 || vals[0] != node {
		t.Fatalf("volume affinity %v, pod on %s", vals, node)
	}

	// The next pod of the claim follows the volume.
	for i := range 4 {
		p := podWith("data")
		p.Name = fmt.Sprintf("again-%d", i)
		create(store.Pods, p)
	}
	storetest.Eventually(t, 20*time.Second, func() error {
		for i := range 4 {
			o, err := s.Get(ctx, store.Pods, "default", fmt.Sprintf("again-%d", i))
			if err != nil {
				return err
			}
			if got := o.(*corev1.Pod).Spec.NodeName; got != node {
				return fmt.Errorf("again-%d on %q, want %s", i, got, node)
			}
		}
		return nil
	})

	// An unbound Immediate claim keeps its pod Pending, with the reason.
	create(storage.StorageClasses, class("fast", "example.com/fast", storagev1.VolumeBindingImmediate))
	create(core.PersistentVolumeClaims, pvcOf("fast-data", "fast", "", ""))
	waiting := podWith("fast-data")
	waiting.Name = "waiting"
	create(store.Pods, waiting)
	storetest.Eventually(t, 20*time.Second, func() error {
		o, err := s.Get(ctx, store.Pods, "default", "waiting")
		if err != nil {
			return err
		}
		p := o.(*corev1.Pod)
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable &&
				strings.Contains(c.Message, volumebinding.ErrReasonUnboundImmediate) {
				return nil
			}
		}
		return fmt.Errorf("pod conditions %+v (node %q)", p.Status.Conditions, p.Spec.NodeName)
	})
	// A volume appearing for it lets it go (the PV controller binds, the
	// scheduler is told by the claim's update).
	static := pinned("pv-fast", "fast", "edge-2")
	create(core.PersistentVolumes, static)
	storetest.Eventually(t, 20*time.Second, func() error {
		o, err := s.Get(ctx, store.Pods, "default", "waiting")
		if err != nil {
			return err
		}
		if got := o.(*corev1.Pod).Spec.NodeName; got != "edge-2" {
			return fmt.Errorf("waiting pod on %q, want edge-2", got)
		}
		return nil
	})
}
