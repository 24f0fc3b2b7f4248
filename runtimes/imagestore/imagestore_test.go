package imagestore_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes/containerd/ocilayout"
	"github.com/orca-edge/orca/runtimes/imagestore"
)

func newStore(t *testing.T) *imagestore.Store {
	t.Helper()
	ns := storetest.StartNATS(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := imagestore.New(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func archive(t *testing.T, name string, data string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := ocilayout.Write(&buf, name, ocispec.ImageConfig{Entrypoint: []string{"/x"}}, ocilayout.File{Path: "/x", Mode: 0o755, Data: []byte(data)}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rewrite copies a tar archive, letting edit change or drop entries
// (nil drops) and add appends more.
func rewrite(t *testing.T, in []byte, edit func(name string, b []byte) []byte, add map[string][]byte) []byte {
	t.Helper()
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	tr := tar.NewReader(bytes.NewReader(in))
	put := func(name string, b []byte) {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b))})
		tw.Write(b)
	}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if b = edit(h.Name, b); b != nil {
			put(h.Name, b)
		}
	}
	for n, b := range add {
		put(n, b)
	}
	tw.Close()
	return out.Bytes()
}

func TestPushResolveOpen(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	a := archive(t, "docker.io/library/app:v1", "one")
	img, err := s.Push(ctx, "", bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	if img.Name != "docker.io/library/app:v1" || !strings.HasPrefix(img.Digest, "sha256:") || img.Size != uint64(len(a)) {
		t.Fatalf("Push = %+v", img)
	}
	desc, _, err := imagestore.Inspect(bytes.NewReader(a))
	if err != nil || desc.Digest.String() != img.Digest {
		t.Fatalf("the stored digest %s is not the image's manifest digest %s (%v)", img.Digest, desc.Digest, err)
	}
	// Another name for the same bytes: one object, two links.
	if img2, err := s.Push(ctx, "registry.lan:5000/team/app:v2", bytes.NewReader(a)); err != nil || img2.Digest != img.Digest {
		t.Fatalf("second Push = %+v, %v", img2, err)
	}
	for _, ref := range []string{"app:v1", "docker.io/library/app:v1", "registry.lan:5000/team/app:v2", "app@" + img.Digest} {
		d, ok, err := s.Resolve(ctx, ref)
		if err != nil || !ok || d != img.Digest {
			t.Errorf("Resolve(%s) = %s, %v, %v", ref, d, ok, err)
		}
	}
	for _, ref := range []string{"app:v3", "other:v1", "app@sha256:" + strings.Repeat("0", 64), "UPPER"} {
		if _, ok, err := s.Resolve(ctx, ref); ok || err != nil {
			t.Errorf("Resolve(%s) = %v, %v; want not found", ref, ok, err)
		}
	}
	rc, err := s.Open(ctx, img.Digest)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, a) {
		t.Errorf("Open returned %d bytes, pushed %d", len(got), len(a))
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "docker.io/library/app:v1" || list[1].Name != "registry.lan:5000/team/app:v2" || list[0].Size != uint64(len(a)) {
		t.Errorf("List = %+v, %v", list, err)
	}
	// The tag moves to other bytes.
	b := archive(t, "docker.io/library/app:v1", "two")
	img3, err := s.Push(ctx, "app:v1", bytes.NewReader(b))
	if err != nil || img3.Digest == img.Digest {
		t.Fatalf("re-push = %+v, %v", img3, err)
	}
	if d, _, _ := s.Resolve(ctx, "app:v1"); d != img3.Digest {
		t.Errorf("the tag did not move: %s", d)
	}
}

func TestPushInvalid(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	a := archive(t, "docker.io/library/app:v1", "one")
	desc, _, _ := imagestore.Inspect(bytes.NewReader(a))
	two := rewrite(t, a, func(name string, b []byte) []byte {
		if name == "index.json" {
			return bytes.Replace(b, []byte(`"manifests":[`), []byte(`"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"`+desc.Digest.String()+`","size":`+strconv.FormatInt(desc.Size, 10)+`},`), 1)
		}
		return b
	}, nil)
	for name, tc := range map[string]struct {
		name string
		data []byte
		want string
	}{
		"not a tar":      {"app:v1", []byte("hello"), "not a tar"},
		"no layout":      {"app:v1", rewrite(t, a, func(n string, b []byte) []byte { return keepUnless(n, "oci-layout", b) }, nil), "oci-layout"},
		"no index":       {"app:v1", rewrite(t, a, func(n string, b []byte) []byte { return keepUnless(n, "index.json", b) }, nil), "index.json"},
		"two images":     {"app:v1", two, "lists 2 images"},
		"missing blob":   {"app:v1", rewrite(t, a, func(n string, b []byte) []byte { return keepUnless(n, "blobs/sha256/"+desc.Digest.Encoded(), b) }, nil), "not in the archive"},
		"corrupted blob": {"app:v1", rewrite(t, a, func(n string, b []byte) []byte { return corrupt(n, b) }, nil), "has sha256"},
		"digest name":    {"app@" + desc.Digest.String(), a, "not a digest"},
		"bad name":       {"UPPER:v1", a, "invalid"},
		// containerd's importer cleans names: a second index.json under
		// another spelling is the one a node would import.
		"index twice":  {"app:v1", rewrite(t, a, func(n string, b []byte) []byte { return b }, map[string][]byte{"x/../index.json": indexOf(t, two)}), "index.json appears twice"},
		"layout twice": {"app:v1", rewrite(t, a, func(n string, b []byte) []byte { return b }, map[string][]byte{"./oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`)}), "oci-layout appears twice"},
		// containerd imports only layout version 1.0.0.
		"layout version": {"app:v1", rewrite(t, a, func(n string, b []byte) []byte {
			if n == "oci-layout" {
				return []byte(`{"imageLayoutVersion":"2.0.0"}`)
			}
			return b
		}, nil), "is not 1.0.0"},
		"unnamed": {"", rewrite(t, a, func(n string, b []byte) []byte {
			if n == "index.json" {
				return bytes.ReplaceAll(b, []byte("io.containerd.image.name"), []byte("x.other"))
			}
			return b
		}, nil), "does not name its image"},
	} {
		_, err := s.Push(ctx, tc.name, bytes.NewReader(tc.data))
		if !errors.Is(err, imagestore.ErrInvalidArchive) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidArchive saying %q", name, err, tc.want)
		}
	}
	if list, _ := s.List(ctx); len(list) != 0 {
		t.Errorf("invalid pushes left %v", list)
	}
}

// indexOf is the index.json of archive a.
func indexOf(t *testing.T, a []byte) []byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(a))
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no index.json: %v", err)
		}
		if h.Name == "index.json" {
			b, _ := io.ReadAll(tr)
			return b
		}
	}
}

func keepUnless(name, drop string, b []byte) []byte {
	if name == drop {
		return nil
	}
	return b
}

// corrupt flips a byte of every blob.
func corrupt(name string, b []byte) []byte {
	if strings.HasPrefix(name, "blobs/") && len(b) > 0 {
		c := append([]byte(nil), b...)
		c[len(c)/2] ^= 0xff
		return c
	}
	return b
}
