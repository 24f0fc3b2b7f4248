package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/orca-edge/orca/controlplane/auth/encryption"
	"github.com/orca-edge/orca/controlplane/store"
)

// encryptionOptions are kube-apiserver's flags for encryption at rest.
type encryptionOptions struct {
	configFile   string
	autoReload   bool
	reloadPeriod time.Duration
}

func (e *encryptionOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&e.configFile, "encryption-provider-config", "",
		"EncryptionConfiguration file (apiserver.config.k8s.io/v1) for objects at rest; empty: <data-dir>/encryption-config.yaml, written on first start with a random AES-256-GCM key for secrets")
	f.BoolVar(&e.autoReload, "encryption-provider-config-automatic-reload", false,
		"reload the encryption provider configuration when its file changes (polled every minute)")
	f.DurationVar(&e.reloadPeriod, "encryption-provider-config-reload-period", time.Minute, "how often --encryption-provider-config-automatic-reload polls the file")
}

// transformers loads (or, by default, creates) the encryption provider
// configuration and starts its reload loop when asked.
func (e *encryptionOptions) transformers(ctx context.Context, dataDir string) (*encryption.Dynamic, error) {
	path := e.configFile
	if path == "" {
		path = filepath.Join(dataDir, "encryption-config.yaml")
		_, created, err := encryption.EnsureFile(path)
		if err != nil {
			return nil, fmt.Errorf("--encryption-provider-config: %w", err)
		}
		if created {
			slog.Info("encryption at rest: wrote a new key for secrets; keep this file safe, without it stored Secrets cannot be read", "file", path)
		}
	}
	d, err := encryption.NewDynamic(path)
	if err != nil {
		return nil, fmt.Errorf("--encryption-provider-config: %w", err)
	}
	slog.Info("encryption at rest", "file", path, "secretsEncrypted", d.Current().Encrypts(store.Secrets.GroupResource()), "automaticReload", e.autoReload)
	if e.autoReload {
		go d.Run(ctx, e.reloadPeriod)
	}
	return d, nil
}
