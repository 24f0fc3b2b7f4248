package containerdtest

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/crypto/bcrypt"
)

// Registry is an OCI distribution registry of one test: Debian's
// docker-registry (github.com/docker/distribution) serving plain HTTP on
// a random 127.0.0.1 port, its storage under t.TempDir().
type Registry struct {
	// Host is "127.0.0.1:<port>", the registry part of image references.
	Host string
	// Username and Password are the credentials it requires (htpasswd
	// auth), or "" when it serves anyone.
	Username, Password string
}

// RegistryOption configures StartRegistry.
type RegistryOption func(*registryConfig)

type registryConfig struct{ user, password string }

// WithBasicAuth makes the registry require user and password (HTTP basic
// auth against a bcrypt htpasswd file) for every request.
func WithBasicAuth(user, password string) RegistryOption {
	return func(c *registryConfig) { c.user, c.password = user, password }
}

// RequireRegistry skips t unless docker-registry is installed (it fails
// t under CI, which installs it).
func RequireRegistry(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("docker-registry"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("docker-registry is not installed: apt-get install docker-registry")
		}
		t.Skipf("docker-registry is not installed: apt-get install docker-registry")
	}
}

// StartRegistry starts a registry for t (stopped at cleanup) and returns
// once it answers /v2/. It skips t as RequireRegistry does.
func StartRegistry(t testing.TB, opts ...RegistryOption) *Registry {
	t.Helper()
	RequireRegistry(t)
	var c registryConfig
	for _, o := range opts {
		o(&c)
	}
	dir := t.TempDir()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	r := &Registry{Host: fmt.Sprintf("127.0.0.1:%d", port), Username: c.user, Password: c.password}
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(dir, "data"), r.Host)
	if c.user != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(c.password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(c.user+":"+string(hash)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg += fmt.Sprintf("auth:\n  htpasswd:\n    realm: orca-test\n    path: %s\n", htpasswd)
	}
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command("docker-registry", "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start docker-registry: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + r.Host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return r
			}
		}
		select {
		case <-exited:
			t.Fatalf("docker-registry exited: %s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry on %s did not answer in 30s: %v\n%s", r.Host, err, out.String())
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Push uploads the single image of the OCI image layout archive (as
// WriteImage and BuildGoImage write) to the registry as repoTag
// ("hello:v1", "team/app:v2"), over the OCI distribution API (blob
// uploads, then the manifest PUT), with the registry's credentials. It
// returns the image's reference ("127.0.0.1:<port>/hello:v1") and its
// manifest digest.
func (r *Registry) Push(ctx context.Context, archive io.Reader, repoTag string) (ref string, dgst digest.Digest, err error) {
	blobs, index, err := readLayout(archive)
	if err != nil {
		return "", "", err
	}
	if len(index.Manifests) != 1 {
		return "", "", fmt.Errorf("push: the archive holds %d images, want 1", len(index.Manifests))
	}
	md := index.Manifests[0]
	mb, ok := blobs[md.Digest]
	if !ok {
		return "", "", fmt.Errorf("push: manifest %s missing from the archive", md.Digest)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return "", "", fmt.Errorf("push: manifest: %w", err)
	}
	repo, tag, ok := strings.Cut(repoTag, ":")
	if !ok {
		tag = "latest"
	}
	base := "http://" + r.Host + "/v2/" + repo
	for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		b, ok := blobs[d.Digest]
		if !ok {
			return "", "", fmt.Errorf("push: blob %s missing from the archive", d.Digest)
		}
		if err := r.pushBlob(ctx, base, d.Digest, b); err != nil {
			return "", "", err
		}
	}
	mt := md.MediaType
	if mt == "" {
		mt = ocispec.MediaTypeImageManifest
	}
	if _, err := r.do(ctx, http.MethodPut, base+"/manifests/"+tag, mt, mb, http.StatusCreated); err != nil {
		return "", "", fmt.Errorf("push manifest: %w", err)
	}
	return r.Host + "/" + repo + ":" + tag, md.Digest, nil
}

// PushFile is Push of the archive at path.
func (r *Registry) PushFile(ctx context.Context, path, repoTag string) (string, digest.Digest, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	return r.Push(ctx, f, repoTag)
}

func (r *Registry) pushBlob(ctx context.Context, base string, d digest.Digest, b []byte) error {
	resp, err := r.do(ctx, http.MethodPost, base+"/blobs/uploads/", "", nil, http.StatusAccepted)
	if err != nil {
		return fmt.Errorf("push blob %s: start upload: %w", d, err)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		return fmt.Errorf("push blob %s: upload location: %w", d, err)
	}
	u, _ := url.Parse(base)
	loc = u.ResolveReference(loc)
	q := loc.Query()
	q.Set("digest", d.String())
	loc.RawQuery = q.Encode()
	if _, err := r.do(ctx, http.MethodPut, loc.String(), "application/octet-stream", b, http.StatusCreated); err != nil {
		return fmt.Errorf("push blob %s: %w", d, err)
	}
	return nil
}

func (r *Registry) do(ctx context.Context, method, u, contentType string, body []byte, want int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if r.Username != "" {
		req.SetBasicAuth(r.Username, r.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != want {
		return nil, fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, bytes.TrimSpace(msg))
	}
	return resp, nil
}

// readLayout reads an OCI image layout archive into its blobs by digest
// and its index.
func readLayout(archive io.Reader) (map[digest.Digest][]byte, ocispec.Index, error) {
	blobs := map[digest.Digest][]byte{}
	var index ocispec.Index
	var haveIndex bool
	tr := tar.NewReader(archive)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, index, fmt.Errorf("read archive: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, index, fmt.Errorf("read archive: %w", err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		switch {
		case name == "index.json":
			if err := json.Unmarshal(b, &index); err != nil {
				return nil, index, fmt.Errorf("index.json: %w", err)
			}
			haveIndex = true
		case strings.HasPrefix(name, "blobs/sha256/"):
			blobs[digest.NewDigestFromEncoded(digest.SHA256, strings.TrimPrefix(name, "blobs/sha256/"))] = b
		}
	}
	if !haveIndex {
		return nil, index, errors.New("read archive: no index.json")
	}
	return blobs, index, nil
}
