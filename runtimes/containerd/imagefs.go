package containerd

import (
	"context"
	"fmt"
	"sort"

	ctrd "github.com/containerd/containerd"
	"golang.org/x/sys/unix"

	"github.com/orca-edge/orca/runtimes"
)

var _ runtimes.ImageManager = (*Runtime)(nil)

// ListImages returns the images of the namespace grouped by digest (the
// names pointing at one digest are one image), with their content size
// for this node's platform and whether a container of the namespace
// (running or not) was created from one of their names.
func (r *Runtime) ListImages(ctx context.Context) ([]runtimes.Image, error) {
	ctx = withNamespace(ctx, r.cfg.Namespace)
	imgs, err := r.client.ImageService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	cs, err := r.client.ContainerService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	used := map[string]bool{}
	for _, c := range cs {
		used[c.Image] = true
	}
	byID := map[string]*runtimes.Image{}
	for _, m := range imgs {
		id := m.Target.Digest.String()
		img, ok := byID[id]
		if !ok {
			size, err := ctrd.NewImage(r.client, m).Size(ctx)
			if err != nil {
				size = m.Target.Size // content missing for this platform: what is known
			}
			img = &runtimes.Image{ID: id, Size: size}
			byID[id] = img
		}
		img.Names = append(img.Names, m.Name)
		img.InUse = img.InUse || used[m.Name]
	}
	out := make([]runtimes.Image, 0, len(byID))
	for _, img := range byID {
		sort.Strings(img.Names)
		out = append(out, *img)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// ImageFsStats returns the capacity and free space (for unprivileged
// users, as df's "Available") of the filesystem of the snapshotter's
// root, which containerd reports in its plugin's exports.
func (r *Runtime) ImageFsStats(ctx context.Context) (runtimes.FsStats, error) {
	resp, err := r.client.IntrospectionService().Plugins(ctx, []string{
		fmt.Sprintf(`type==%q,id==%q`, "io.containerd.snapshotter.v1", r.cfg.Snapshotter)})
	if err != nil {
		return runtimes.FsStats{}, fmt.Errorf("image filesystem: %w", err)
	}
	var root string
	for _, p := range resp.Plugins {
		root = p.Exports["root"]
	}
	if root == "" {
		return runtimes.FsStats{}, fmt.Errorf("image filesystem: snapshotter %s reports no root", r.cfg.Snapshotter)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return runtimes.FsStats{}, fmt.Errorf("image filesystem %s: %w", root, err)
	}
	bs := uint64(st.Bsize)
	return runtimes.FsStats{CapacityBytes: st.Blocks * bs, AvailableBytes: st.Bavail * bs}, nil
}
