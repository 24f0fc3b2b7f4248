package store

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedConfig configures an in-process NATS server with JetStream.
type EmbeddedConfig struct {
	// Host to listen on. Default "127.0.0.1".
	Host string
	// Port to listen on; -1 picks a random free port. Default 4222.
	Port int
	// DataDir holds JetStream's files. Required.
	DataDir string
	// SyncAlways fsyncs every write before acknowledging it, as etcd does
	// (README, design decision 7). Default in orca-server: true. Alone, it
	// is JetStream's sync_always: the server fsyncs each message itself,
	// one fsync per write and bucket, in turn.
	SyncAlways bool
	// GroupCommit, with SyncAlways, moves the fsync from the server into
	// the stores on it: the server writes each message to its file but
	// does not fsync it, and a store with Config.GroupCommit set to
	// NewGroupCommit(server) fsyncs before returning each write, one fsync
	// for the writes waiting together (see groupcommit.go). Every writer
	// that needs its writes on disk must go through such a store; other
	// clients' writes are fsynced by JetStream's background sync only
	// (every 2 minutes). Default in orca-server: true.
	GroupCommit bool
	// ServerName names the server in NATS' own monitoring. Default "orca".
	ServerName string
	// TLS, when set, makes clients connect over TLS only (nats-server's
	// tls block: the server presents TLS.Certificates; client
	// certificates are not asked for). Handshakes must finish within 2 s.
	TLS *tls.Config
	// Configure, when set, edits the server options last, before the
	// server starts (natsauth.Authority.Configure puts it in JWT mode).
	Configure func(*server.Options) error
}

// StartEmbedded starts a NATS server with JetStream and waits until it
// accepts connections (up to 10 s). Shut it down with Shutdown.
func StartEmbedded(cfg EmbeddedConfig) (*server.Server, error) {
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("embedded nats: data directory is required")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Port == 0 {
		cfg.Port = 4222
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "orca"
	}
	opts := &server.Options{
		ServerName: cfg.ServerName,
		Host:       cfg.Host,
		Port:       cfg.Port,
		JetStream:  true,
		StoreDir:   cfg.DataDir,
		SyncAlways: cfg.SyncAlways && !cfg.GroupCommit,
		NoSigs:     true,
		// Every node agent holds one consumer of the NodePods stream
		// (its own pods' keys): nats-server's default of 1,000
		// consumers per stream (JSDefaultMaxConsumersPerStream) would
		// refuse the watches of the nodes past about 1,000. -1:
		// unlimited; the account's JetStream limits bound nothing
		// either (natsauth).
		JetStreamLimits: server.JSLimitOpts{DefaultMaxConsumers: -1},
	}
	if cfg.TLS != nil {
		opts.TLS, opts.TLSConfig, opts.TLSTimeout = true, cfg.TLS, 2
	}
	if cfg.Configure != nil {
		if err := cfg.Configure(opts); err != nil {
			return nil, fmt.Errorf("embedded nats: %w", err)
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready on %s:%d after 10s (is the port already in use?)", cfg.Host, cfg.Port)
	}
	return ns, nil
}
