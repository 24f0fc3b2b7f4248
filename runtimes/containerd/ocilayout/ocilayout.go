// Package ocilayout writes OCI image layout archives (oci-layout,
// index.json, blobs/sha256/...; the format of `docker save --format oci`,
// `ctr images export` and `orca image push`) of single-layer Linux images
// built from files alone: a static binary becomes a runnable image with no
// registry, no docker and no download.
package ocilayout

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	_ "crypto/sha256" // registers SHA-256 for go-digest
	"encoding/json"
	"io"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// File is one regular file (or symbolic link) of an image layer.
type File struct {
	Path string // in the image, "/job"
	Mode int64  // permission bits, 0o755
	Data []byte
	// Link, when set, makes the file a symbolic link to Link (Mode and
	// Data are then ignored).
	Link string
}

// Write writes an OCI image layout archive (oci-layout, index.json,
// blobs/sha256/...) of one linux image for this machine's architecture,
// named name (io.containerd.image.name; its tag is the
// org.opencontainers.image.ref.name), with cfg as its config and files in
// a single gzip layer. Its output depends only on its arguments.
func Write(w io.Writer, name string, cfg ocispec.ImageConfig, files ...File) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	for _, f := range files {
		p := strings.TrimPrefix(filepath.Clean(f.Path), "/")
		for d := filepath.Dir(p); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return err
			}
		}
		if f.Link != "" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: f.Link, Mode: 0o777, ModTime: epoch}); err != nil {
				return err
			}
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: f.Mode, Size: int64(len(f.Data)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	diffID := digest.FromBytes(layer.Bytes())
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(layer.Bytes())
	if err := zw.Close(); err != nil {
		return err
	}
	blobs := map[digest.Digest][]byte{}
	add := func(mediaType string, b []byte) ocispec.Descriptor {
		d := digest.FromBytes(b)
		blobs[d] = b
		return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
	}
	layerDesc := add(ocispec.MediaTypeImageLayerGzip, gz.Bytes())
	platform := ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH}
	config, _ := json.Marshal(ocispec.Image{
		Platform: platform,
		Config:   cfg,
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
	})
	configDesc := add(ocispec.MediaTypeImageConfig, config)
	manifest, _ := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    configDesc,
		Layers:    []ocispec.Descriptor{layerDesc},
	})
	manifestDesc := add(ocispec.MediaTypeImageManifest, manifest)
	manifestDesc.Platform = &platform
	tag := name
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		tag = name[i+1:]
	}
	manifestDesc.Annotations = map[string]string{
		"io.containerd.image.name": name,
		ocispec.AnnotationRefName:  tag,
	}
	index, _ := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{manifestDesc},
	})
	layout, _ := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})

	out := tar.NewWriter(w)
	put := func(name string, b []byte) error {
		if err := out.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return err
		}
		_, err := out.Write(b)
		return err
	}
	if err := put(ocispec.ImageLayoutFile, layout); err != nil {
		return err
	}
	if err := put("index.json", index); err != nil {
		return err
	}
	names := make([]string, 0, len(blobs))
	for d := range blobs {
		names = append(names, string(d))
	}
	sort.Strings(names) // the same files give the same archive
	for _, d := range names {
		if err := put("blobs/sha256/"+digest.Digest(d).Encoded(), blobs[digest.Digest(d)]); err != nil {
			return err
		}
	}
	return out.Close()
}
