package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/runtimes"
)

// Defaults of ImageGCConfig, the kubelet's.
const (
	DefaultImageGCHighThresholdPercent = 85
	DefaultImageGCLowThresholdPercent  = 80
	DefaultImageMinimumGCAge           = 2 * time.Minute
	DefaultImageGCPeriod               = 5 * time.Minute
)

// ImageGCConfig configures the garbage collection of unused images, as
// the kubelet's image manager (realImageGCManager): every Period, for
// each runtime that is a runtimes.ImageManager, when the image
// filesystem's usage (100 - available*100/capacity) is at or above
// HighThresholdPercent, images that no container and no pod of the node
// uses, detected at least MinAge ago, are removed, least recently used
// first, until the usage would be below LowThresholdPercent. Usage is
// counted in image sizes, as the kubelet does; if not enough can be
// freed the Node gets a FreeDiskSpaceFailed warning Event.
type ImageGCConfig struct {
	// HighThresholdPercent, 1-100, default 85 (--image-gc-high-threshold);
	// 100 turns image garbage collection off.
	HighThresholdPercent int
	// LowThresholdPercent, 1-99 and below HighThresholdPercent, default 80
	// (--image-gc-low-threshold).
	LowThresholdPercent int
	// MinAge is how long an image must have been seen before it may be
	// removed; default 2m (--minimum-image-gc-age). A negative value is
	// no minimum.
	MinAge time.Duration
	// Period is how often usage is checked; default 5m.
	Period time.Duration
	// FsStats, when set, replaces the runtimes' ImageFsStats (tests).
	FsStats func(ctx context.Context, rt runtimes.ImageManager) (runtimes.FsStats, error)
}

// withDefaults validates c and fills in its defaults.
func (c ImageGCConfig) withDefaults() (ImageGCConfig, error) {
	if c.HighThresholdPercent == 0 {
		c.HighThresholdPercent = DefaultImageGCHighThresholdPercent
	}
	if c.LowThresholdPercent == 0 {
		c.LowThresholdPercent = DefaultImageGCLowThresholdPercent
	}
	if c.MinAge == 0 {
		c.MinAge = DefaultImageMinimumGCAge
	}
	if c.Period <= 0 {
		c.Period = DefaultImageGCPeriod
	}
	if c.HighThresholdPercent < 1 || c.HighThresholdPercent > 100 {
		return c, fmt.Errorf("image GC high threshold %d%%: must be in [1, 100]", c.HighThresholdPercent)
	}
	if c.LowThresholdPercent < 1 || c.LowThresholdPercent > 100 {
		return c, fmt.Errorf("image GC low threshold %d%%: must be in [1, 100]", c.LowThresholdPercent)
	}
	if c.LowThresholdPercent >= c.HighThresholdPercent && c.HighThresholdPercent != 100 {
		return c, fmt.Errorf("image GC low threshold %d%% must be less than the high threshold %d%%", c.LowThresholdPercent, c.HighThresholdPercent)
	}
	return c, nil
}

// imageRecord is what the image manager remembers of one image.
type imageRecord struct {
	firstDetected time.Time
	lastUsed      time.Time // zero: never seen in use
	size          int64
	names         []string
}

// imageGC is the image manager of one runtime.
type imageGC struct {
	a   *Agent
	rt  runtimes.Runtime
	im  runtimes.ImageManager
	mu  sync.Mutex              // guards images
	ims map[string]*imageRecord // by image ID; mu must be held
}

// imageGCLoop runs the garbage collection of every runtime that can list
// its images, every Period, until ctx ends.
func (a *Agent) imageGCLoop(ctx context.Context) {
	cfg := a.cfg.ImageGC
	if cfg.HighThresholdPercent == 100 {
		return
	}
	var gcs []*imageGC
	for _, rt := range a.cfg.Runtimes {
		if im, ok := rt.(runtimes.ImageManager); ok {
			gcs = append(gcs, &imageGC{a: a, rt: rt, im: im, ims: map[string]*imageRecord{}})
		}
	}
	if len(gcs) == 0 {
		return
	}
	t := time.NewTicker(cfg.Period)
	defer t.Stop()
	for {
		for _, g := range gcs {
			if err := g.garbageCollect(ctx, time.Now()); err != nil && ctx.Err() == nil {
				a.log.Warn("image garbage collection failed", "runtime", g.rt.Handler(), "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// podImages returns the images the node's pods name (every container,
// init and ephemeral container of every pod bound here), normalized:
// the agent removes a task once it exits, so a container between two
// restarts still counts as using its image.
func (a *Agent) podImages() map[string]bool {
	out := map[string]bool{}
	add := func(image string) {
		named, err := reference.ParseDockerRef(image)
		if err != nil {
			return
		}
		out[named.String()] = true
		if d, ok := named.(reference.Digested); ok {
			out[d.Digest().String()] = true
		}
	}
	for _, o := range a.nodePods.List("", nil) {
		p := o.(*corev1.Pod)
		for _, c := range p.Spec.InitContainers {
			add(c.Image)
		}
		for _, c := range p.Spec.Containers {
			add(c.Image)
		}
		for _, c := range p.Spec.EphemeralContainers {
			add(c.Image)
		}
	}
	return out
}

// detect lists the images, records new ones and the use of the ones in
// use (by a container of the runtime or a pod of the node), forgets the
// ones gone, and returns the IDs in use.
func (g *imageGC) detect(ctx context.Context, now time.Time) (map[string]bool, error) {
	imgs, err := g.im.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	pods := g.a.podImages()
	inUse := map[string]bool{}
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[string]bool{}
	for _, img := range imgs {
		seen[img.ID] = true
		rec, ok := g.ims[img.ID]
		if !ok {
			rec = &imageRecord{firstDetected: now}
			g.ims[img.ID] = rec
		}
		rec.size, rec.names = img.Size, img.Names
		used := img.InUse || pods[img.ID]
		for _, n := range img.Names {
			used = used || pods[n]
		}
		if used {
			inUse[img.ID] = true
			rec.lastUsed = now
		}
	}
	for id := range g.ims {
		if !seen[id] {
			delete(g.ims, id)
		}
	}
	return inUse, nil
}

// garbageCollect frees images when the image filesystem is too full (the
// kubelet's GarbageCollect).
func (g *imageGC) garbageCollect(ctx context.Context, now time.Time) error {
	cfg := g.a.cfg.ImageGC
	inUse, err := g.detect(ctx, now)
	if err != nil {
		return fmt.Errorf("detect images: %w", err)
	}
	var st runtimes.FsStats
	if cfg.FsStats != nil {
		st, err = cfg.FsStats(ctx, g.im)
	} else {
		st, err = g.im.ImageFsStats(ctx)
	}
	if err != nil {
		return err
	}
	if st.CapacityBytes == 0 {
		return errors.New("image filesystem reports a capacity of 0 bytes")
	}
	avail := min(st.AvailableBytes, st.CapacityBytes)
	usage := 100 - int(avail*100/st.CapacityBytes)
	if usage < cfg.HighThresholdPercent {
		return nil
	}
	toFree := int64(st.CapacityBytes*uint64(100-cfg.LowThresholdPercent)/100) - int64(avail)
	g.a.log.Info("image filesystem usage over the high threshold: removing unused images",
		"runtime", g.rt.Handler(), "usage", usage, "highThreshold", cfg.HighThresholdPercent, "lowThreshold", cfg.LowThresholdPercent, "bytesToFree", toFree)
	freed, err := g.freeSpace(ctx, toFree, inUse, now)
	if err != nil {
		return err
	}
	if freed < toFree {
		msg := fmt.Sprintf("Failed to garbage collect required amount of images. Attempted to free %d bytes, but only found %d bytes eligible to free.", toFree, freed)
		g.a.log.Warn(msg, "runtime", g.rt.Handler())
		if node, err := g.a.api.Get(ctx, store.Nodes, "", g.a.cfg.NodeName); err == nil {
			g.a.recorder.Event(node, "", corev1.EventTypeWarning, "FreeDiskSpaceFailed", msg)
		}
	}
	return nil
}

// freeSpace removes images not in use, detected at least MinAge before
// now, least recently used first (then first detected), until their
// sizes add up to toFree; it returns the bytes freed.
func (g *imageGC) freeSpace(ctx context.Context, toFree int64, inUse map[string]bool, now time.Time) (int64, error) {
	type candidate struct {
		id string
		imageRecord
	}
	var cands []candidate
	g.mu.Lock()
	for id, rec := range g.ims {
		if inUse[id] || (g.a.cfg.ImageGC.MinAge > 0 && now.Sub(rec.firstDetected) < g.a.cfg.ImageGC.MinAge) {
			continue
		}
		cands = append(cands, candidate{id, *rec})
	}
	g.mu.Unlock()
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if !a.lastUsed.Equal(b.lastUsed) {
			return a.lastUsed.Before(b.lastUsed)
		}
		if !a.firstDetected.Equal(b.firstDetected) {
			return a.firstDetected.Before(b.firstDetected)
		}
		return a.id < b.id
	})
	var freed int64
	var errs []error
	for _, c := range cands {
		if freed >= toFree {
			break
		}
		removed := true
		for _, name := range c.names {
			if err := g.im.RemoveImage(ctx, name); err != nil {
				errs = append(errs, err)
				removed = false
			}
		}
		if !removed {
			continue
		}
		g.a.log.Info("removed unused image", "runtime", g.rt.Handler(), "image", c.id, "names", c.names, "size", c.size, "lastUsed", c.lastUsed)
		g.mu.Lock()
		delete(g.ims, c.id)
		g.mu.Unlock()
		freed += c.size
	}
	return freed, errors.Join(errs...)
}
