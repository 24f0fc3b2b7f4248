package containerdtest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Packages of the example workloads, built as static Linux binaries.
const (
	// JobPackage is the workload of the conformance suite's Job image.
	JobPackage = "github.com/orca-edge/orca/examples/hello-wasm/job"
	// HelloPackage serves HTTP on $PORT (default 8080) outside CGI.
	HelloPackage = "github.com/orca-edge/orca/examples/hello-wasm"
)

// File is one regular file of an image layer.
type File struct {
	Path string // in the image, "/job"
	Mode int64  // permission bits, 0o755
	Data []byte
}

// BuildGoBinary builds pkg with CGO_ENABLED=0 for linux on this machine's
// architecture into dir and returns the binary's path. It must run inside
// the orca module (tests do).
func BuildGoBinary(dir, pkg string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// BuildGoImage builds pkg (BuildGoBinary) and writes an OCI image archive
// named name (a normalized reference, "docker.io/library/job:v1") into
// dir, holding the binary as /<base name of pkg>. cfg is the image's
// config; a nil cfg has the binary as ENTRYPOINT. It returns the
// archive's path.
func BuildGoImage(dir, name, pkg string, cfg *ocispec.ImageConfig) (string, error) {
	bin, err := BuildGoBinary(dir, pkg)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	path := "/" + filepath.Base(pkg)
	if cfg == nil {
		cfg = &ocispec.ImageConfig{Entrypoint: []string{path}}
	}
	out := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(name)+".tar")
	f, err := os.Create(out)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := WriteImage(f, name, *cfg, File{Path: path, Mode: 0o755, Data: data}); err != nil {
		return "", err
	}
	return out, f.Close()
}

// WriteImage writes an OCI image layout archive (oci-layout, index.json,
// blobs/sha256/...) of one linux image for this machine's architecture,
// named name (io.containerd.image.name; its tag is the
// org.opencontainers.image.ref.name), with cfg as its config and files in
// a single gzip layer.
func WriteImage(w io.Writer, name string, cfg ocispec.ImageConfig, files ...File) error {
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
	for d, b := range blobs {
		if err := put("blobs/sha256/"+d.Encoded(), b); err != nil {
			return err
		}
	}
	return out.Close()
}
