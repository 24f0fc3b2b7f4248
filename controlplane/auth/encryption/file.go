package encryption

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/orca-edge/orca/controlplane/store"
)

// DefaultKeyName names the key of a configuration written by Default.
const DefaultKeyName = "key1"

// Default returns a new EncryptionConfiguration (YAML) that encrypts
// secrets with aesgcm under one random 32-byte (AES-256) key named
// DefaultKeyName, then identity, so values written in plain text (by an
// orca without encryption) still read, and are encrypted when next
// written.
func Default() ([]byte, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("encryption: random key: %w", err)
	}
	return fmt.Appendf(nil, `# Written by orca-server on its first start: Secrets are encrypted at rest
# (AES-256-GCM) with the first key; every listed key and identity (plain
# text) still decrypt. Keep this file private (mode 0600) and out of backups
# of the NATS data; losing it loses every Secret. Rotation: README.md,
# "Secrets encryption at rest".
apiVersion: %s
kind: %s
resources:
- resources:
  - secrets
  providers:
  - aesgcm:
      keys:
      - name: %s
        secret: %s
  - identity: {}
`, APIVersion, Kind, DefaultKeyName, base64.StdEncoding.EncodeToString(key)), nil
}

// EnsureFile loads the configuration at path; when no file exists there
// it first writes Default's (mode 0600, its directory created 0700) and
// reports created. The file appears whole or not at all (written aside,
// then linked into place), and a file another process created meanwhile
// is kept.
func EnsureFile(path string) (cfg *Config, created bool, err error) {
	if _, err := os.Stat(path); err == nil {
		cfg, err := LoadFile(path)
		return cfg, false, err
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("encryption provider configuration: %w", err)
	}
	data, err := Default()
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("encryption provider configuration: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".encryption-config-*")
	if err != nil {
		return nil, false, fmt.Errorf("encryption provider configuration: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err == nil {
		if _, err = tmp.Write(data); err == nil {
			err = tmp.Sync()
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, false, fmt.Errorf("encryption provider configuration: write %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, false, fmt.Errorf("encryption provider configuration: %w", err)
	} else if err == nil {
		created = true
	}
	cfg, err = LoadFile(path)
	return cfg, created, err
}

// Dynamic is a value.ResourceTransformers over a configuration file that
// Run reloads when the file's content changes, as kube-apiserver's
// --encryption-provider-config-automatic-reload: a file that no longer
// parses keeps the last good configuration (and is reported). Every
// store operation looks its transformer up again, so a reload applies to
// the next read or write.
type Dynamic struct {
	path string
	cur  atomic.Pointer[Config]
}

var _ store.ResourceTransformers = (*Dynamic)(nil)

// NewDynamic loads path; it fails as LoadFile.
func NewDynamic(path string) (*Dynamic, error) {
	c, err := LoadFile(path)
	if err != nil {
		return nil, err
	}
	d := &Dynamic{path: path}
	d.cur.Store(c)
	return d, nil
}

// NewStatic returns a Dynamic that always serves c (Reload is a no-op).
func NewStatic(c *Config) *Dynamic {
	d := &Dynamic{}
	d.cur.Store(c)
	return d
}

// Current returns the configuration in use.
func (d *Dynamic) Current() *Config { return d.cur.Load() }

// TransformerForResource returns the store's view of
// Current().ValueTransformer(gr), nil when gr is not configured.
func (d *Dynamic) TransformerForResource(gr schema.GroupResource) store.Transformer {
	t := d.cur.Load().ValueTransformer(gr)
	if t == nil {
		return nil
	}
	return adapter{t}
}

// adapter is a value.Transformer as a store.Transformer.
type adapter struct{ t value.Transformer }

func (a adapter) TransformToStorage(ctx context.Context, data, ad []byte) ([]byte, error) {
	return a.t.TransformToStorage(ctx, data, value.DefaultContext(ad))
}

func (a adapter) TransformFromStorage(ctx context.Context, data, ad []byte) ([]byte, bool, error) {
	return a.t.TransformFromStorage(ctx, data, value.DefaultContext(ad))
}

// Reload reads the file again and switches to it when its content
// changed; changed reports a switch. On an error the configuration in
// use stays.
func (d *Dynamic) Reload() (changed bool, err error) {
	if d.path == "" {
		return false, nil
	}
	c, err := LoadFile(d.path)
	if err != nil {
		return false, err
	}
	if c.Hash == d.cur.Load().Hash {
		return false, nil
	}
	d.cur.Store(c)
	return true, nil
}

// Run calls Reload every interval (Kubernetes polls once a minute) until
// ctx ends, logging switches and errors.
func (d *Dynamic) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			changed, err := d.Reload()
			if err != nil {
				slog.Error("encryption provider configuration not reloaded; the previous one stays in use", "err", err)
			} else if changed {
				slog.Info("encryption provider configuration reloaded", "file", d.path, "hash", d.cur.Load().Hash)
			}
		}
	}
}
