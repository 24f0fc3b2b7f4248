package persistentvolume_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/controllers/persistentvolume"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/registry/storage"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

const wait = 20 * time.Second

// bed is the controller over a real store with a recorded DeleteVolume.
type bed struct {
	s   *store.Store
	reg *registry.Registry
	ctx context.Context

	mu      sync.Mutex
	deleted []string // "node volume path" of each DeleteVolume call
	failDel error
}

func start(t *testing.T, cfg persistentvolume.Config) *bed {
	t.Helper()
	b := &bed{s: storetest.NewStore(t), reg: builtin.New(), ctx: context.Background()}
	cfg.DeleteVolume = func(_ context.Context, node, volume, path string) error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.failDel != nil {
			return b.failDel
		}
		b.deleted = append(b.deleted, node+" "+volume+" "+path)
		return nil
	}
	inf := store.NewSharedInformers(b.s)
	c := persistentvolume.New(b.s, b.reg, inf.For(core.PersistentVolumeClaims), inf.For(core.PersistentVolumes), inf.For(storage.StorageClasses),
		inf.For(store.Pods), inf.For(store.Nodes), cfg)
	storetest.RunUntilCleanup(t, func(ctx context.Context) error {
		inf.Start(ctx)
		for _, r := range []store.Resource{core.PersistentVolumeClaims, core.PersistentVolumes, storage.StorageClasses, store.Pods, store.Nodes} {
			inf.For(r).WaitForSync(ctx)
		}
		c.Run(ctx, 2)
		inf.Wait()
		return nil
	})
	return b
}

func (b *bed) create(t *testing.T, r store.Resource, obj store.Object) store.Object {
	t.Helper()
	out, err := b.reg.Create(b.ctx, b.s, r, obj)
	if err != nil {
		t.Fatalf("create %s %s: %v", r.Kind, obj.GetName(), err)
	}
	return out
}

func (b *bed) claim(t *testing.T, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	o, err := b.s.Get(b.ctx, core.PersistentVolumeClaims, "default", name)
	if err != nil {
		t.Fatalf("claim %s: %v", name, err)
	}
	return o.(*corev1.PersistentVolumeClaim)
}

func (b *bed) volume(name string) (*corev1.PersistentVolume, error) {
	o, err := b.s.Get(b.ctx, core.PersistentVolumes, "", name)
	if err != nil {
		return nil, err
	}
	return o.(*corev1.PersistentVolume), nil
}

func (b *bed) deletes() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.deleted)
}

func newClaim(name, size string, class *string, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: modes, StorageClassName: class,
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
	}}
}

func claimPhase(b *bed, t *testing.T, name string, want corev1.PersistentVolumeClaimPhase) func() error {
	return func() error {
		if c := b.claim(t, name); c.Status.Phase != want {
			return fmt.Errorf("claim %s is %s, want %s", name, c.Status.Phase, want)
		}
		return nil
	}
}

func hasEvent(b *bed, obj string, reason string) error {
	objs, _, err := b.s.List(b.ctx, store.Events, "")
	if err != nil {
		return err
	}
	var seen []string
	for _, o := range objs {
		ev := o.(*corev1.Event)
		if ev.InvolvedObject.Name == obj && ev.Reason == reason {
			return nil
		}
		seen = append(seen, ev.InvolvedObject.Name+":"+ev.Reason)
	}
	return fmt.Errorf("no %s event of %s among %v", reason, obj, seen)
}

// TestDynamicProvisioning follows a claim of the default class through
// WaitForFirstConsumer, the selected node, the provisioned PV with its
// node affinity and path, Bound, the pvc-protection finalizer held by a
// running pod, and reclaim Delete (the directory removed on its node,
// then the PV).
func TestDynamicProvisioning(t *testing.T) {
	b := start(t, persistentvolume.Config{})
	b.create(t, store.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1",
		Labels:      map[string]string{corev1.LabelHostname: "edge-1"},
		Annotations: map[string]string{persistentvolume.AnnNodeLocalStoragePath: "/var/lib/orca-agent/storage"}}})
	storetest.Eventually(t, wait, func() error {
		o, err := b.s.Get(b.ctx, storage.StorageClasses, "", persistentvolume.DefaultClassName)
		if err != nil {
			return err
		}
		if sc := o.(*storagev1.StorageClass); !storage.IsDefaultClass(sc) || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer ||
			sc.Provisioner != persistentvolume.RancherLocalPath || *sc.ReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
			return fmt.Errorf("default class %+v", sc)
		}
		return nil
	})

	// No class: the default one is given; then it waits for a consumer.
	b.create(t, core.PersistentVolumeClaims, newClaim("data", "1Gi", nil))
	storetest.Eventually(t, wait, func() error {
		if c := b.claim(t, "data"); c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != persistentvolume.DefaultClassName {
			return fmt.Errorf("class %v", c.Spec.StorageClassName)
		}
		return hasEvent(b, "data", persistentvolume.EventWaitForFirstConsumer)
	})
	if c := b.claim(t, "data"); c.Status.Phase != corev1.ClaimPending || c.Spec.VolumeName != "" {
		t.Fatalf("claim before a consumer: %+v", c.Status)
	}

	// The scheduler's choice makes the volume, pinned to that node.
	if _, err := b.reg.GuaranteedUpdate(b.ctx, b.s, core.PersistentVolumeClaims, "default", "data", nil, func(o store.Object) (store.Object, error) {
		metav1.SetMetaDataAnnotation(&o.(*corev1.PersistentVolumeClaim).ObjectMeta, core.AnnSelectedNode, "edge-1")
		return o, nil
	}); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, wait, claimPhase(b, t, "data", corev1.ClaimBound))
	claim := b.claim(t, "data")
	pvName := persistentvolume.VolumeName(claim)
	if q := claim.Status.Capacity[corev1.ResourceStorage]; claim.Spec.VolumeName != pvName || q.String() != "1Gi" ||
		!slices.Equal(claim.Status.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) || claim.Annotations[core.AnnBindCompleted] != "yes" {
		t.Fatalf("bound claim: volume %q status %+v annotations %v", claim.Spec.VolumeName, claim.Status, claim.Annotations)
	}
	pv, err := b.volume(pvName)
	if err != nil {
		t.Fatal(err)
	}
	wantPath := "/var/lib/orca-agent/storage/" + pvName + "_default_data"
	if pv.Spec.HostPath == nil || pv.Spec.HostPath.Path != wantPath || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != claim.UID ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.Spec.StorageClassName != persistentvolume.DefaultClassName ||
		pv.Annotations[core.AnnDynamicallyProvisioned] != persistentvolume.RancherLocalPath || !slices.Contains(pv.Finalizers, core.PVProtectionFinalizer) {
		t.Fatalf("provisioned volume %+v", pv)
	}
	term := pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0]
	if term.Key != corev1.LabelHostname || !slices.Equal(term.Values, []string{"edge-1"}) {
		t.Fatalf("node affinity %+v", term)
	}
	storetest.Eventually(t, wait, func() error {
		if pv, err := b.volume(pvName); err != nil || pv.Status.Phase != corev1.VolumeBound {
			return fmt.Errorf("volume %v %v", pv, err)
		}
		return hasEvent(b, "data", persistentvolume.EventProvisioningSucceeded)
	})

	// A running pod keeps the claim (pvc-protection) until it ends.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "user"}, Spec: corev1.PodSpec{NodeName: "edge-1",
		Containers: []corev1.Container{{Name: "c", Image: "x"}},
		Volumes:    []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
	pod.Status.Phase = corev1.PodRunning
	registry.PrepareCreate(mustKind(t, b.reg, store.Pods), pod)
	if _, err := b.s.Create(b.ctx, store.Pods, pod); err != nil {
		t.Fatal(err)
	}
	if _, err := b.reg.Delete(b.ctx, b.s, core.PersistentVolumeClaims, "default", "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The claim stays: the controller sees the pod (its informer, or a
	// consistent list of the store when the informer has none). A claim
	// queued after the deleted one and seen synced (it gets the default
	// class) shows that the controller has taken the deleted one.
	b.create(t, core.PersistentVolumeClaims, newClaim("probe", "1Gi", nil))
	storetest.Eventually(t, wait, func() error {
		if c := b.claim(t, "probe"); c.Spec.StorageClassName == nil {
			return errors.New("probe claim not synced yet")
		}
		return nil
	})
	if c := b.claim(t, "data"); c.DeletionTimestamp == nil || !slices.Contains(c.Finalizers, core.PVCProtectionFinalizer) {
		t.Fatalf("claim in use: %+v", c.ObjectMeta)
	}
	if _, err := b.s.GuaranteedUpdate(b.ctx, store.Pods, "default", "user", nil, func(o store.Object) (store.Object, error) {
		o.(*corev1.Pod).Status.Phase = corev1.PodSucceeded
		return o, nil
	}); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, wait, func() error {
		if _, err := b.s.Get(b.ctx, core.PersistentVolumeClaims, "default", "data"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("claim still there: %v", err)
		}
		if _, err := b.volume(pvName); !apierrors.IsNotFound(err) {
			return fmt.Errorf("volume still there: %v", err)
		}
		return nil
	})
	if got := b.deletes(); !slices.Equal(got, []string{"edge-1 " + pvName + " " + wantPath}) {
		t.Fatalf("directory deletions %v", got)
	}
}

func mustKind(t *testing.T, reg *registry.Registry, r store.Resource) *registry.Kind {
	k, err := reg.Kind(r)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func staticPV(name, size, class string, policy corev1.PersistentVolumeReclaimPolicy, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		AccessModes: modes, StorageClassName: class, PersistentVolumeReclaimPolicy: policy,
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
		PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/mnt/" + name}},
	}}
}

// TestStaticBinding binds claims to pre-created volumes by class, size
// and access modes (the smallest that fits), and reclaims them: Retain
// keeps a Released volume, Delete of a volume no provisioner of ours
// made fails (Failed, VolumeFailedDelete), and a failed directory removal
// is retried.
func TestStaticBinding(t *testing.T) {
	b := start(t, persistentvolume.Config{DisableDefaultClass: true})
	rwo, rwx := corev1.ReadWriteOnce, corev1.ReadWriteMany
	b.create(t, core.PersistentVolumes, staticPV("small", "1Gi", "manual", corev1.PersistentVolumeReclaimRetain, rwo))
	b.create(t, core.PersistentVolumes, staticPV("big", "5Gi", "manual", corev1.PersistentVolumeReclaimDelete, rwo))
	b.create(t, core.PersistentVolumes, staticPV("noclass", "10Gi", "", corev1.PersistentVolumeReclaimRetain, rwo))
	storetest.Eventually(t, wait, func() error {
		for _, n := range []string{"small", "big", "noclass"} {
			if pv, err := b.volume(n); err != nil || pv.Status.Phase != corev1.VolumeAvailable {
				return fmt.Errorf("volume %s: %v %v", n, pv, err)
			}
		}
		return nil
	})
	manual := "manual"
	b.create(t, core.PersistentVolumeClaims, newClaim("a", "500Mi", &manual))    // small
	b.create(t, core.PersistentVolumeClaims, newClaim("b", "2Gi", &manual))      // big
	b.create(t, core.PersistentVolumeClaims, newClaim("c", "1Gi", &manual, rwx)) // none left with RWX
	b.create(t, core.PersistentVolumeClaims, newClaim("d", "1Gi", new("")))      // noclass
	storetest.Eventually(t, wait, func() error {
		for claim, vol := range map[string]string{"a": "small", "b": "big", "d": "noclass"} {
			c := b.claim(t, claim)
			if c.Status.Phase != corev1.ClaimBound || c.Spec.VolumeName != vol {
				return fmt.Errorf("claim %s: %s %q", claim, c.Status.Phase, c.Spec.VolumeName)
			}
			pv, err := b.volume(vol)
			if err != nil || pv.Status.Phase != corev1.VolumeBound || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Name != claim {
				return fmt.Errorf("volume %s: %v %v", vol, pv, err)
			}
		}
		return hasEvent(b, "c", persistentvolume.EventProvisioningFailed) // class "manual" does not exist
	})
	if c := b.claim(t, "c"); c.Status.Phase != corev1.ClaimPending {
		t.Fatalf("claim c: %s", c.Status.Phase)
	}

	// Retain: Released, kept, nothing removed.
	if _, err := b.reg.Delete(b.ctx, b.s, core.PersistentVolumeClaims, "default", "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Delete of a volume no local-path provisioner made: Failed.
	if _, err := b.reg.Delete(b.ctx, b.s, core.PersistentVolumeClaims, "default", "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, wait, func() error {
		if pv, err := b.volume("small"); err != nil || pv.Status.Phase != corev1.VolumeReleased {
			return fmt.Errorf("small: %v %v", pv, err)
		}
		if pv, err := b.volume("big"); err != nil || pv.Status.Phase != corev1.VolumeFailed {
			return fmt.Errorf("big: %v %v", pv, err)
		}
		return hasEvent(b, "big", persistentvolume.EventVolumeFailedDelete)
	})
	if got := b.deletes(); len(got) != 0 {
		t.Fatalf("directories removed: %v", got)
	}

	// A pre-bound claim (volumeName) takes the Released-and-freed volume
	// only once an admin clears its claimRef; a new claim named in a
	// volume's claimRef (no uid) binds to it.
	b.create(t, core.PersistentVolumes, func() *corev1.PersistentVolume {
		pv := staticPV("reserved", "1Gi", "manual", corev1.PersistentVolumeReclaimRetain, rwo)
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "default", Name: "e"}
		return pv
	}())
	b.create(t, core.PersistentVolumeClaims, newClaim("e", "1Gi", &manual))
	storetest.Eventually(t, wait, func() error {
		if c := b.claim(t, "e"); c.Status.Phase != corev1.ClaimBound || c.Spec.VolumeName != "reserved" {
			return fmt.Errorf("claim e: %s %q", c.Status.Phase, c.Spec.VolumeName)
		}
		return nil
	})

	// A failed directory removal of a local-path volume is retried.
	b.mu.Lock()
	b.failDel = errors.New("node edge-9 did not answer")
	b.mu.Unlock()
	lp := staticPV("lp", "1Gi", "manual", corev1.PersistentVolumeReclaimDelete, rwo)
	lp.Annotations = map[string]string{core.AnnDynamicallyProvisioned: persistentvolume.LocalPathProvisioner, persistentvolume.AnnLocalPathNode: "edge-9"}
	lp.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "default", Name: "gone", UID: "0000"}
	b.create(t, core.PersistentVolumes, lp)
	storetest.Eventually(t, wait, func() error { return hasEvent(b, "lp", persistentvolume.EventVolumeFailedDelete) })
	if pv, err := b.volume("lp"); err != nil || pv.Status.Phase != corev1.VolumeReleased {
		t.Fatalf("lp after a failed removal: %v %v", pv, err)
	}
	b.mu.Lock()
	b.failDel = nil
	b.mu.Unlock()
	storetest.Eventually(t, wait, func() error {
		if _, err := b.volume("lp"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("lp still there: %v", err)
		}
		return nil
	})
	if got := b.deletes(); !slices.Equal(got, []string{"edge-9 lp /mnt/lp"}) {
		t.Fatalf("directory deletions %v", got)
	}
}
