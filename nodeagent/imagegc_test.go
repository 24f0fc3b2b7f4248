package nodeagent

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/containerd/ocilayout"
)

// imageNames returns the names of the runtime's images, sorted.
func imageNames(t *testing.T, im runtimes.ImageManager) []string {
	t.Helper()
	imgs, err := im.ListImages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, img := range imgs {
		out = append(out, img.Names...)
	}
	sort.Strings(out)
	return out
}

// Image garbage collection on a real containerd, with an image
// filesystem whose usage is the images' sizes (so that removing images
// lowers it): over the high threshold, unused images go, least recently
// used first, until usage is under the low threshold; an image a running
// container uses, or one recently used, stays; when even removing every
// unused image is not enough, the Node gets FreeDiskSpaceFailed.
func TestImageGarbageCollection(t *testing.T) {
	ce := startContainerd(t)
	rt := ce.runtime(t)
	ctx := context.Background()
	// Three images of 4 MiB of random bytes each (gzip cannot shrink them).
	for _, name := range []string{"docker.io/library/a:v1", "docker.io/library/b:v1", "docker.io/library/c:v1"} {
		data := make([]byte, 4<<20)
		rand.Read(data)
		var buf bytes.Buffer
		if err := ocilayout.Write(&buf, name, ocispec.ImageConfig{Entrypoint: []string{"/data"}}, ocilayout.File{Path: "/data", Mode: 0o644, Data: data}); err != nil {
			t.Fatal(err)
		}
		if _, err := rt.Import(ctx, &buf); err != nil {
			t.Fatal(err)
		}
	}
	all := imageNames(t, rt)
	imgs, _ := rt.ListImages(ctx)
	var total int64
	for _, img := range imgs {
		total += img.Size
	}
	// Usage: the images' sizes over a capacity where today's images fill
	// 90%; pressure makes it 100% full whatever is removed.
	capacity := uint64(total) * 100 / 90
	var pressure atomic.Bool
	stats := func(ctx context.Context, im runtimes.ImageManager) (runtimes.FsStats, error) {
		imgs, err := im.ListImages(ctx)
		if err != nil {
			return runtimes.FsStats{}, err
		}
		var used uint64
		for _, img := range imgs {
			used += uint64(img.Size)
		}
		if pressure.Load() || used > capacity {
			return runtimes.FsStats{CapacityBytes: capacity}, nil
		}
		return runtimes.FsStats{CapacityBytes: capacity, AvailableBytes: capacity - used}, nil
	}
	var gcOn atomic.Bool
	var cycles atomic.Int64 // GC cycles run (each detects the images in use first)
	e := newEnv(t)
	a, _ := e.agent("edge-gc", func(c *Config) {
		c.ImageGC = ImageGCConfig{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: -1, Period: 100 * time.Millisecond,
			FsStats: func(ctx context.Context, im runtimes.ImageManager) (runtimes.FsStats, error) {
				cycles.Add(1)
				if !gcOn.Load() { // under the threshold until the pods below are set up
					return runtimes.FsStats{CapacityBytes: capacity, AvailableBytes: capacity}, nil
				}
				return stats(ctx, im)
			}}
	}, rt)
	// waitCycle waits until a GC cycle started after the call has run.
	waitCycle := func() {
		n := cycles.Load()
		storetest.Eventually(t, 10*time.Second, func() error {
			if cycles.Load() < n+2 {
				return fmt.Errorf("no GC cycle since")
			}
			return nil
		})
	}

	// job:v1 runs for the whole test; b:v1 was used a moment ago (a pod
	// named it, and is gone).
	p := simplePod("runs", "job:v1", corev1.RestartPolicyNever)
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "SLEEP_SECONDS", Value: "120"}}
	e.pod("edge-gc", p)
	e.waitPod("default", "runs", 60*time.Second, phaseIs(corev1.PodRunning))
	used := simplePod("used", "b:v1", corev1.RestartPolicyNever)
	used.Spec.Containers[0].Command = []string{"/no-such-binary"} // it need not run: a pod naming it uses it
	e.pod("edge-gc", used)
	storetest.Eventually(t, 10*time.Second, func() error {
		if _, ok := a.nodePods.Get("default", "used"); !ok {
			return fmt.Errorf("pod used not on the node yet")
		}
		return nil
	})
	waitCycle()
	if _, err := e.s.Delete(ctx, store.Pods, "default", "used", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		if _, ok := a.nodePods.Get("default", "used"); ok {
			return fmt.Errorf("pod used still on the node")
		}
		return nil
	})

	gcOn.Store(true)
	var removed []string
	storetest.Eventually(t, 20*time.Second, func() error {
		st, err := stats(ctx, rt)
		if err != nil {
			return err
		}
		if usage := 100 - st.AvailableBytes*100/st.CapacityBytes; usage >= 80 {
			return fmt.Errorf("usage %d%% (images %v)", usage, imageNames(t, rt))
		}
		removed = nil
		now := imageNames(t, rt)
		for _, n := range all {
			if !slices.Contains(now, n) {
				removed = append(removed, n)
			}
		}
		return nil
	})
	// Never used: a, c and hello-container; the oldest of them by
	// detection goes first, and one is enough to get under 80%.
	if len(removed) != 1 || !slices.Contains([]string{"docker.io/library/a:v1", "docker.io/library/c:v1", helloImage}, removed[0]) {
		t.Errorf("removed %v, want one image never used", removed)
	}
	if now := imageNames(t, rt); !slices.Contains(now, jobImage) || !slices.Contains(now, "docker.io/library/b:v1") {
		t.Errorf("images left %v: the one in use and the one used last must stay", now)
	}

	// Full whatever is removed: every unused image goes, the one in use
	// stays, and the Node says it could not free enough.
	pressure.Store(true)
	storetest.Eventually(t, 20*time.Second, func() error {
		if now := imageNames(t, rt); !slices.Equal(now, []string{jobImage}) {
			return fmt.Errorf("images %v, want only %s", now, jobImage)
		}
		objs, _, err := e.s.List(ctx, store.Events, "default")
		if err != nil {
			return err
		}
		for _, o := range objs {
			if ev := o.(*corev1.Event); ev.Reason == "FreeDiskSpaceFailed" && ev.InvolvedObject.Kind == "Node" && ev.InvolvedObject.Name == "edge-gc" {
				return nil
			}
		}
		return fmt.Errorf("no FreeDiskSpaceFailed event on the Node")
	})
	if p, _ := e.getPod("default", "runs"); p.Status.Phase != corev1.PodRunning {
		t.Errorf("the running pod: phase %s", p.Status.Phase)
	}
}

func TestImageGCConfig(t *testing.T) {
	c, err := ImageGCConfig{}.withDefaults()
	if err != nil || c.HighThresholdPercent != 85 || c.LowThresholdPercent != 80 || c.MinAge != 2*time.Minute || c.Period != 5*time.Minute {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	for _, bad := range []ImageGCConfig{{HighThresholdPercent: 101}, {HighThresholdPercent: 70, LowThresholdPercent: 70}, {LowThresholdPercent: -1}, {HighThresholdPercent: 50, LowThresholdPercent: 60}} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v: want an error", bad)
		}
	}
	if _, err := (ImageGCConfig{HighThresholdPercent: 100}).withDefaults(); err != nil {
		t.Errorf("100 (off): %v", err)
	}
}
