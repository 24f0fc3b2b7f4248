package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/images"
	"github.com/distribution/reference"

	"github.com/orca-edge/orca/runtimes"
)

// NormalizeImage returns the image reference as containerd's image store
// names it, normalized as Kubernetes does: a name without a registry is
// on docker.io, one without a path under library/, and one without a tag
// or digest is tagged latest ("job:v1" is "docker.io/library/job:v1").
func NormalizeImage(ref string) (string, error) {
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	return named.String(), nil
}

func (r *Runtime) unpack(ctx context.Context, img ctrd.Image) error {
	ok, err := img.IsUnpacked(ctx, r.cfg.Snapshotter)
	if err == nil && ok {
		return nil
	}
	if err := img.Unpack(ctx, r.cfg.Snapshotter); err != nil {
		return fmt.Errorf("unpack image %s for %s: %v: %w", img.Name(), r.cfg.Snapshotter, err, runtimes.ErrImage)
	}
	return nil
}

// Import reads an OCI image layout archive (a tar of index.json,
// oci-layout and blobs/sha256/..., as `ctr images import` and `docker
// save` in OCI mode take) into containerd's content store, names each
// image of its index by its io.containerd.image.name annotation (which
// must be normalized already) or else its org.opencontainers.image.ref.name
// annotation (normalized here, see NormalizeImage), unpacks each for the snapshotter (this node's platform
// only) and returns their names. An image with the same name is replaced.
// It fails, wrapping runtimes.ErrImage, for an archive that is not such a
// layout or names no image.
func (r *Runtime) Import(ctx context.Context, archive io.Reader) ([]string, error) {
	ctx = withNamespace(ctx, r.cfg.Namespace)
	imgs, err := r.client.Import(ctx, archive, ctrd.WithImageRefTranslator(func(ref string) string {
		if n, err := NormalizeImage(ref); err == nil {
			return n
		}
		return ref
	}))
	if err != nil {
		return nil, fmt.Errorf("import image archive: %v: %w", err, runtimes.ErrImage)
	}
	if len(imgs) == 0 {
		return nil, fmt.Errorf("import image archive: its index names no image (no io.containerd.image.name or org.opencontainers.image.ref.name annotation): %w", runtimes.ErrImage)
	}
	var names []string
	for _, m := range imgs {
		img := ctrd.NewImage(r.client, m)
		if err := r.unpack(ctx, img); err != nil {
			return names, fmt.Errorf("import image archive: %w", err)
		}
		names = append(names, m.Name)
	}
	return names, nil
}

// RemoveImage deletes the image named ref (normalized) from the store
// and returns once containerd's garbage collector has freed what no
// other name or container refers to (content and snapshots).
// An image that is not there is not an error.
func (r *Runtime) RemoveImage(ctx context.Context, ref string) error {
	name, err := NormalizeImage(ref)
	if err != nil {
		return err
	}
	// Synchronous: containerd's garbage collector has run (content and
	// snapshots no name or container refers to are gone) when it returns.
	err = r.client.ImageService().Delete(withNamespace(ctx, r.cfg.Namespace), name, images.SynchronousDelete())
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove image %s: %w", name, err)
	}
	return nil
}
