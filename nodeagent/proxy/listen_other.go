//go:build !linux

package proxy

import "net"

// listenConfig returns the configuration of Service listeners: the
// defaults, since SO_REUSEPORT balances connections only on Linux; a second
// agent on the host fails to bind, logs it and retries (see listen.go).
func listenConfig(bool) *net.ListenConfig { return &net.ListenConfig{} }
