package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orca-edge/orca/runtimes"
)

// ModuleBucket is the NATS Object Store bucket holding WASM modules.
const ModuleBucket = "wasm-modules"

// MaxModuleBytes bounds the size of a pushed module: 256 MiB.
const MaxModuleBytes = 256 << 20

// ModuleStore keeps WASM modules in the NATS Object Store bucket
// "wasm-modules". A module is stored once, as the object named by its digest
// ("sha256:<hex>"); each tag ("hello-wasm:v1") is a link object pointing at
// a digest object, so re-tagging is cheap and `nats object ls wasm-modules`
// reads naturally. Safe for concurrent use.
type ModuleStore struct {
	obs jetstream.ObjectStore
}

// NewModuleStore opens the bucket "wasm-modules", creating it (file
// storage) if it does not exist.
func NewModuleStore(ctx context.Context, js jetstream.JetStream) (*ModuleStore, error) {
	obs, err := js.ObjectStore(ctx, ModuleBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      ModuleBucket,
			Description: "orca WASM modules: objects sha256:<hex>, links name:tag",
			Storage:     jetstream.FileStorage,
		})
		if err != nil {
			// Lost a creation race with another process: open what it made.
			if obs2, err2 := js.ObjectStore(ctx, ModuleBucket); err2 == nil {
				obs, err = obs2, nil
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open object store %s: %w", ModuleBucket, err)
	}
	return &ModuleStore{obs: obs}, nil
}

// Push stores the module read from r under its digest (unless an object
// with that digest exists already) and points the link name ("name:tag";
// a bare name means ":latest") at it. It returns the digest "sha256:<hex>".
// Errors: name is not a valid "name[:tag]"; the bytes are not a WASM binary
// (magic \0asm, version 1) or exceed MaxModuleBytes; NATS failures.
func (m *ModuleStore) Push(ctx context.Context, name string, r io.Reader) (string, error) {
	ref, err := ParseRef(name)
	if err != nil {
		return "", fmt.Errorf("push module: %w", err)
	}
	if ref.Digest != "" {
		return "", fmt.Errorf("push module %q: want name[:tag], not a digest", name)
	}
	data, err := io.ReadAll(io.LimitReader(r, MaxModuleBytes+1))
	if err != nil {
		return "", fmt.Errorf("push module %s: read: %w", ref, err)
	}
	if len(data) > MaxModuleBytes {
		return "", fmt.Errorf("push module %s: larger than %d bytes", ref, MaxModuleBytes)
	}
	if err := Validate(data); err != nil {
		return "", fmt.Errorf("push module %s: %w", ref, err)
	}
	digest := Digest(data)
	info, err := m.obs.GetInfo(ctx, digest)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		info, err = m.obs.Put(ctx, jetstream.ObjectMeta{
			Name:        digest,
			Description: "wasm module",
			Headers:     map[string][]string{"Orca-Pushed-As": {ref.String()}},
		}, bytes.NewReader(data))
	}
	if err != nil {
		return "", fmt.Errorf("push module %s: store object %s: %w", ref, digest, err)
	}
	if _, err := m.obs.AddLink(ctx, ref.String(), info); err != nil {
		return "", fmt.Errorf("push module %s: link to %s: %w", ref, digest, err)
	}
	return digest, nil
}

// Resolve returns the digest a reference names: "name:tag", "name"
// (= "name:latest"), "name@sha256:<hex>" or "sha256:<hex>". Digest
// references are checked to exist. An unknown or invalid reference gives an
// error wrapping runtimes.ErrImage.
func (m *ModuleStore) Resolve(ctx context.Context, ref string) (string, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return "", fmt.Errorf("resolve module: %w: %w", runtimes.ErrImage, err)
	}
	if r.Digest != "" {
		if _, err := m.obs.GetInfo(ctx, r.Digest); err != nil {
			return "", m.notFound(ref, err)
		}
		return r.Digest, nil
	}
	info, err := m.obs.GetInfo(ctx, r.String())
	if err != nil {
		return "", m.notFound(ref, err)
	}
	if info.Opts == nil || info.Opts.Link == nil || !ValidDigest(info.Opts.Link.Name) {
		return "", fmt.Errorf("resolve module %q: object %s is not a link to a digest: %w", ref, r, runtimes.ErrImage)
	}
	return info.Opts.Link.Name, nil
}

// Fetch resolves ref and reads the module, verifying that the sha256 of the
// bytes read equals the digest. Errors wrap runtimes.ErrImage for unknown
// references and digest mismatches.
func (m *ModuleStore) Fetch(ctx context.Context, ref string) ([]byte, string, error) {
	digest, err := m.Resolve(ctx, ref)
	if err != nil {
		return nil, "", err
	}
	data, err := m.obs.GetBytes(ctx, digest)
	if err != nil {
		return nil, "", m.notFound(ref, err)
	}
	if got := Digest(data); got != digest {
		return nil, "", fmt.Errorf("fetch module %q: object %s has digest %s: %w", ref, digest, got, runtimes.ErrImage)
	}
	return data, digest, nil
}

func (m *ModuleStore) notFound(ref string, err error) error {
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("module %q not found in %s: %w", ref, ModuleBucket, runtimes.ErrImage)
	}
	return fmt.Errorf("module %q: %w", ref, err)
}

// ModuleInfo describes one tag in the module store.
type ModuleInfo struct {
	// Name is the tag, "name:tag".
	Name string `json:"name"`
	// Digest is the module the tag points at, "sha256:<hex>".
	Digest string `json:"digest"`
	// Size is the module's size in bytes.
	Size uint64 `json:"size"`
	// Modified is when the tag was last pushed.
	Modified time.Time `json:"modified"`
}

// List returns every tag with its digest and module size, sorted by name.
// An empty store gives an empty list.
func (m *ModuleStore) List(ctx context.Context) ([]ModuleInfo, error) {
	objs, err := m.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list modules: %w", err)
	}
	sizes := map[string]uint64{}
	for _, o := range objs {
		sizes[o.Name] = o.Size
	}
	var out []ModuleInfo
	for _, o := range objs {
		if o.Opts == nil || o.Opts.Link == nil || !ValidDigest(o.Opts.Link.Name) {
			continue
		}
		out = append(out, ModuleInfo{Name: o.Name, Digest: o.Opts.Link.Name, Size: sizes[o.Opts.Link.Name], Modified: o.ModTime})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
