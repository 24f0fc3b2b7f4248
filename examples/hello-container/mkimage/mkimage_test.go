package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The archive is an OCI layout naming the image, and the same binary
// gives the same bytes (so the same digest after a rebuild).
func TestWriteIsAReproducibleOCILayout(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	for _, out := range []string{a, b} {
		if err := write(out, "hello-container:v1", bin, 80, bin); err != nil {
			t.Fatal(err)
		}
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Error("two archives of one binary differ")
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(ab))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], _ = io.ReadAll(tr)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].Annotations["io.containerd.image.name"] != "hello-container:v1" {
		t.Errorf("index = %+v", idx)
	}
	if _, ok := files["blobs/sha256/"+idx.Manifests[0].Digest.Encoded()]; !ok {
		t.Error("manifest blob missing")
	}
	pathSet := false
	for _, b := range files { // the image config sets PATH=/bin for the toolbox
		var img ocispec.Image
		if json.Unmarshal(b, &img) == nil && slices.Contains(img.Config.Env, "PATH=/bin") {
			pathSet = true
		}
	}
	if !pathSet {
		t.Error("no image config with PATH=/bin: the toolbox is not installed")
	}
	if _, ok := files[ocispec.ImageLayoutFile]; !ok {
		t.Error("oci-layout missing")
	}
	if err := write(filepath.Join(dir, "c.tar"), "x:v1", filepath.Join(dir, "missing"), 0, ""); err == nil {
		t.Error("a missing binary gave no error")
	}
}
