package nodeagent

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
)

// A memory emptyDir's tmpfs is no larger than what the pod may use: a
// sizeLimit of 1Ei under a 64Mi memory limit is a 64 MiB tmpfs (tmpfs
// pages are not reclaimed, so the pod could otherwise take the node's
// memory), as the kubelet's calculateEmptyDirMemorySize.
func TestMemoryEmptyDirSizeClamped(t *testing.T) {
	containerdtest.Require(t) // root, for the tmpfs
	e := newEnv(t)
	a, _ := e.agent("n1", nil, testruntime.New("runc"))
	p := simplePod("shm", "sleep", corev1.RestartPolicyAlways)
	huge := resource.MustParse("1Ei")
	p.Spec.Volumes = []corev1.Volume{{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &huge}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "shm", MountPath: "/shm"}}
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
	p = e.pod("n1", p)
	dir := filepath.Join(a.podVolumeDir(p.UID), volEmptyDir, "shm")
	storetest.Eventually(t, 10*time.Second, func() error {
		ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
		if err != nil || len(ms) != 1 {
			return fmt.Errorf("mounts on %s: %v, %v", dir, ms, err)
		}
		if !strings.Contains(ms[0].VFSOptions, "size=65536k") {
			return fmt.Errorf("tmpfs options %q, want size=65536k", ms[0].VFSOptions)
		}
		return nil
	})
}

func TestMemoryVolumeBytes(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	limits := func(s string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(s)}}
	}
	const mem = 8 << 30
	for _, tc := range []struct {
		name  string
		cs    []corev1.ResourceRequirements
		inits []corev1.ResourceRequirements
		limit *resource.Quantity
		want  int64
	}{
		{"no limits", []corev1.ResourceRequirements{{}}, nil, nil, mem},
		{"sizeLimit", []corev1.ResourceRequirements{{}}, nil, q("1Gi"), 1 << 30},
		{"sizeLimit over the node", []corev1.ResourceRequirements{{}}, nil, q("1Ei"), mem},
		{"pod limit", []corev1.ResourceRequirements{limits("1Gi"), limits("1Gi")}, nil, q("1Ei"), 2 << 30},
		{"one container unlimited", []corev1.ResourceRequirements{limits("1Gi"), {}}, nil, q("4Gi"), 4 << 30},
		{"init container larger", []corev1.ResourceRequirements{limits("1Gi")}, []corev1.ResourceRequirements{limits("3Gi")}, nil, 3 << 30},
		{"zero sizeLimit", []corev1.ResourceRequirements{limits("1Gi")}, nil, q("0"), 1 << 30},
	} {
		p := &corev1.Pod{}
		for _, r := range tc.cs {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Resources: r})
		}
		for _, r := range tc.inits {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Resources: r})
		}
		if got := memoryVolumeBytes(p, tc.limit, mem); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
