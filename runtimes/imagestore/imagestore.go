// Package imagestore keeps OCI image archives in the cluster's NATS
// Object Store, so that nodes run container images with no registry
// (`orca image push`, the offline edge).
//
// An image is stored once, as the object named by its digest
// ("sha256:<hex>": the digest of the manifest, or index, that the
// archive's index.json names, which is also the image's digest in
// containerd); each reference ("docker.io/library/hello:v1", normalized as
// Kubernetes does) is a link object pointing at a digest object, as
// wasm.ModuleStore keeps modules. `nats object ls oci-images` reads
// naturally. Nodes resolve a reference and import the archive by digest
// (runtimes/containerd's Config.ImageSource).
package imagestore

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Bucket is the NATS Object Store bucket holding image archives.
const Bucket = "oci-images"

// MaxArchiveBytes bounds a pushed archive: 2 GiB.
const MaxArchiveBytes = 2 << 30

// maxIndexBytes bounds index.json and each manifest read to validate an
// archive: 4 MiB (the registries' own manifest limit).
const maxIndexBytes = 4 << 20

// ErrInvalidArchive is wrapped by Push for bytes that are not an OCI
// image layout archive of exactly one image, or that name no image.
var ErrInvalidArchive = errors.New("invalid OCI image archive")

// Annotations naming an image in an index.json entry.
const (
	annotationContainerdName = "io.containerd.image.name"
)

// Image describes one reference in the store.
type Image struct {
	// Name is the normalized reference, "docker.io/library/hello:v1".
	Name string `json:"name"`
	// Digest is the image's digest, "sha256:<hex>".
	Digest string `json:"digest"`
	// Size is the archive's size in bytes.
	Size uint64 `json:"size"`
	// Modified is when the reference was last pushed.
	Modified time.Time `json:"modified"`
}

// Store keeps image archives in the bucket "oci-images". Safe for
// concurrent use.
type Store struct {
	obs    jetstream.ObjectStore
	tmpDir string
}

// New opens the bucket "oci-images", creating it (file storage) if it
// does not exist. Pushes spool the archive to a temporary file under
// os.TempDir() while it is validated.
func New(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	obs, err := js.ObjectStore(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      Bucket,
			Description: "orca OCI image archives: objects sha256:<hex>, links to them by image reference",
			Storage:     jetstream.FileStorage,
		})
		if err != nil {
			// Lost a creation race with another process: open what it made.
			if obs2, err2 := js.ObjectStore(ctx, Bucket); err2 == nil {
				obs, err = obs2, nil
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open object store %s: %w", Bucket, err)
	}
	return &Store{obs: obs}, nil
}

// Normalize returns ref as the store names it: normalized as Kubernetes
// does ("hello:v1" is "docker.io/library/hello:v1"; no tag means
// :latest).
func Normalize(ref string) (string, error) {
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	return named.String(), nil
}

// Push stores the OCI image layout archive read from r (a tar of
// oci-layout, index.json and blobs/sha256/<hex>, as `docker save` in OCI
// mode, `ctr images export` or BuildKit's oci exporter write) under its
// digest, unless that object exists already, and links the reference
// name to it. name is "" to use the name the archive gives its image
// (its io.containerd.image.name annotation, else a full reference in
// org.opencontainers.image.ref.name). It returns the stored image.
//
// The archive must hold oci-layout (version 1.0.0) and index.json once
// each, entry names read as containerd's importer reads them (cleaned:
// "x/../index.json" is index.json), so that what is checked is what
// nodes import; exactly one image (one entry in index.json),
// every blob under its sha256 (checked), and every blob that image's
// manifest (or index, and its manifests) refers to. Errors wrap
// ErrInvalidArchive for such archives, for an archive larger than
// MaxArchiveBytes and for a name that is not a tagged reference; r's own
// errors are returned as they are (an *http.MaxBytesError included).
func (s *Store) Push(ctx context.Context, name string, r io.Reader) (Image, error) {
	if name != "" {
		n, err := reference.ParseDockerRef(name)
		if err != nil {
			return Image{}, fmt.Errorf("push image: %w: %w", ErrInvalidArchive, err)
		}
		if _, ok := n.(reference.Digested); ok {
			return Image{}, fmt.Errorf("push image %q: %w: want a name[:tag], not a digest", name, ErrInvalidArchive)
		}
		name = n.String()
	}
	f, err := os.CreateTemp(s.tmpDir, "orca-image-push-*.tar")
	if err != nil {
		return Image{}, fmt.Errorf("push image: spool: %w", err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	n, err := io.Copy(f, io.LimitReader(r, MaxArchiveBytes+1))
	if err != nil {
		return Image{}, err
	}
	if n > MaxArchiveBytes {
		return Image{}, fmt.Errorf("push image: %w: larger than %d bytes", ErrInvalidArchive, MaxArchiveBytes)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Image{}, err
	}
	desc, archName, err := Inspect(f)
	if err != nil {
		return Image{}, fmt.Errorf("push image: %w", err)
	}
	if name == "" {
		if archName == "" {
			return Image{}, fmt.Errorf("push image: %w: the archive does not name its image (no io.containerd.image.name or full org.opencontainers.image.ref.name annotation): give a name", ErrInvalidArchive)
		}
		name = archName
	}
	dgst := desc.Digest.String()
	info, err := s.obs.GetInfo(ctx, dgst)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return Image{}, err
		}
		info, err = s.obs.Put(ctx, jetstream.ObjectMeta{
			Name:        dgst,
			Description: "oci image archive",
			Headers:     map[string][]string{"Orca-Pushed-As": {name}, "Orca-Media-Type": {desc.MediaType}},
		}, f)
	}
	if err != nil {
		return Image{}, fmt.Errorf("push image %s: store object %s: %w", name, dgst, err)
	}
	if _, err := s.obs.AddLink(ctx, name, info); err != nil {
		return Image{}, fmt.Errorf("push image %s: link to %s: %w", name, dgst, err)
	}
	return Image{Name: name, Digest: dgst, Size: info.Size, Modified: info.ModTime}, nil
}

// Inspect validates the OCI image layout archive read from r (see Push)
// and returns the descriptor of its one image and the name the archive
// gives it ("" when none; normalized). Errors wrap ErrInvalidArchive.
// Every blob is hashed as it streams by; only those of at most 4 MiB
// (manifests, configs) are held in memory.
func Inspect(r io.Reader) (ocispec.Descriptor, string, error) {
	invalid := func(format string, args ...any) (ocispec.Descriptor, string, error) {
		return ocispec.Descriptor{}, "", fmt.Errorf("%w: %s", ErrInvalidArchive, fmt.Sprintf(format, args...))
	}
	var index *ocispec.Index
	var layout bool
	blobs := map[digest.Digest]int64{}
	small := map[digest.Digest][]byte{} // JSON-sized blobs, for the manifests
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return invalid("not a tar archive: %v", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		// Names as containerd's importer reads them (path.Clean), so that
		// the index checked here is the one a node imports.
		name := path.Clean(h.Name)
		switch {
		case name == ocispec.ImageLayoutFile:
			if layout {
				return invalid("%s appears twice", name)
			}
			var l ocispec.ImageLayout
			if err := json.NewDecoder(io.LimitReader(tr, maxIndexBytes)).Decode(&l); err != nil || l.Version == "" {
				return invalid("oci-layout: %v", err)
			}
			if l.Version != ocispec.ImageLayoutVersion {
				return invalid("oci-layout: version %q is not %s", l.Version, ocispec.ImageLayoutVersion)
			}
			layout = true
		case name == "index.json":
			if index != nil {
				return invalid("index.json appears twice")
			}
			index = &ocispec.Index{}
			if err := json.NewDecoder(io.LimitReader(tr, maxIndexBytes)).Decode(index); err != nil {
				return invalid("index.json: %v", err)
			}
		case strings.HasPrefix(name, "blobs/sha256/"):
			enc := strings.TrimPrefix(name, "blobs/sha256/")
			want := digest.NewDigestFromEncoded(digest.SHA256, enc)
			if want.Validate() != nil {
				return invalid("blob %s: not a sha256 digest", name)
			}
			hash := sha256.New()
			var w io.Writer = hash
			buf := &limitedBuffer{max: maxIndexBytes}
			if h.Size <= maxIndexBytes {
				w = io.MultiWriter(hash, buf)
			}
			if _, err := io.Copy(w, tr); err != nil {
				return invalid("blob %s: %v", name, err)
			}
			if got := hex.EncodeToString(hash.Sum(nil)); got != enc {
				return invalid("blob %s has sha256 %s", name, got)
			}
			if h.Size <= maxIndexBytes {
				small[want] = buf.b
			}
			blobs[want] = h.Size
		}
	}
	if !layout {
		return invalid("no oci-layout file (an OCI image layout archive holds oci-layout, index.json and blobs/sha256/)")
	}
	if index == nil {
		return invalid("no index.json")
	}
	if len(index.Manifests) != 1 {
		return invalid("index.json lists %d images; push an archive of exactly one image", len(index.Manifests))
	}
	desc := index.Manifests[0]
	if err := desc.Digest.Validate(); err != nil {
		return invalid("index.json: digest %q: %v", desc.Digest, err)
	}
	if err := checkRefs(desc, blobs, small, 0); err != nil {
		return ocispec.Descriptor{}, "", fmt.Errorf("%w: %v", ErrInvalidArchive, err)
	}
	var name string
	for _, a := range []string{annotationContainerdName, ocispec.AnnotationRefName} {
		if v := desc.Annotations[a]; v != "" && (strings.ContainsAny(v, "/:") || a == annotationContainerdName) {
			if n, err := Normalize(v); err == nil {
				name = n
				break
			}
		}
	}
	return desc, name, nil
}

// checkRefs checks that the blob of desc and everything it refers to is
// in the archive.
func checkRefs(desc ocispec.Descriptor, blobs map[digest.Digest]int64, small map[digest.Digest][]byte, depth int) error {
	size, ok := blobs[desc.Digest]
	if !ok {
		return fmt.Errorf("blob %s (%s) is not in the archive", desc.Digest, desc.MediaType)
	}
	if desc.Size != 0 && size != desc.Size {
		return fmt.Errorf("blob %s has %d bytes, its descriptor says %d", desc.Digest, size, desc.Size)
	}
	switch desc.MediaType {
	case ocispec.MediaTypeImageManifest, "application/vnd.docker.distribution.manifest.v2+json":
		b, ok := small[desc.Digest]
		if !ok {
			return fmt.Errorf("manifest %s is larger than %d bytes", desc.Digest, maxIndexBytes)
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("manifest %s: %v", desc.Digest, err)
		}
		for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
			if _, ok := blobs[d.Digest]; !ok {
				return fmt.Errorf("blob %s (%s) of manifest %s is not in the archive", d.Digest, d.MediaType, desc.Digest)
			}
		}
	case ocispec.MediaTypeImageIndex, "application/vnd.docker.distribution.manifest.list.v2+json":
		if depth > 2 {
			return fmt.Errorf("index %s: nested too deep", desc.Digest)
		}
		b, ok := small[desc.Digest]
		if !ok {
			return fmt.Errorf("index %s is larger than %d bytes", desc.Digest, maxIndexBytes)
		}
		var idx ocispec.Index
		if err := json.Unmarshal(b, &idx); err != nil {
			return fmt.Errorf("index %s: %v", desc.Digest, err)
		}
		for _, d := range idx.Manifests {
			if err := checkRefs(d, blobs, small, depth+1); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("index.json: media type %q is neither an image manifest nor an index", desc.MediaType)
	}
	return nil
}

type limitedBuffer struct {
	b   []byte
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if len(l.b)+len(p) <= l.max {
		l.b = append(l.b, p...)
	}
	return len(p), nil
}

// Resolve returns the digest of the image the reference names in the
// store: a tag ("hello:v1", normalized) or a digest reference
// ("hello@sha256:<hex>", which is checked to exist). ok is false when the
// store does not hold it (and for a reference that does not parse).
// It implements runtimes/containerd's ImageSource.
func (s *Store) Resolve(ctx context.Context, ref string) (string, bool, error) {
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return "", false, nil
	}
	name := named.String()
	if d, ok := named.(reference.Digested); ok {
		name = d.Digest().String()
	}
	info, err := s.obs.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("resolve image %s in %s: %w", ref, Bucket, err)
	}
	if info.Opts != nil && info.Opts.Link != nil {
		return info.Opts.Link.Name, true, nil
	}
	return info.Name, true, nil
}

// Open reads the archive of image dgst ("sha256:<hex>"). The caller
// closes it; containerd's import checks every blob's digest.
func (s *Store) Open(ctx context.Context, dgst string) (io.ReadCloser, error) {
	if _, err := digest.Parse(dgst); err != nil {
		return nil, fmt.Errorf("open image %q: %w", dgst, err)
	}
	rc, err := s.obs.Get(ctx, dgst)
	if err != nil {
		return nil, fmt.Errorf("open image %s in %s: %w", dgst, Bucket, err)
	}
	return rc, nil
}

// List returns every reference with its digest and archive size, sorted
// by name. An empty store gives an empty list.
func (s *Store) List(ctx context.Context) ([]Image, error) {
	objs, err := s.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	sizes := map[string]uint64{}
	for _, o := range objs {
		sizes[o.Name] = o.Size
	}
	var out []Image
	for _, o := range objs {
		if o.Opts == nil || o.Opts.Link == nil {
			continue
		}
		out = append(out, Image{Name: o.Name, Digest: o.Opts.Link.Name, Size: sizes[o.Opts.Link.Name], Modified: o.ModTime})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
