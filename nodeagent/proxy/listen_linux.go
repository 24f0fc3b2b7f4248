package proxy

import (
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// listenConfig returns the configuration of Service listeners: SO_REUSEPORT
// set before bind, so that the agents of one host share each address (see
// listen.go for what that means for TCP, UDP and safety).
func listenConfig() *net.ListenConfig {
	return &net.ListenConfig{Control: setReusePort}
}

func setReusePort(network, address string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("set SO_REUSEPORT on %s %s: %w", network, address, serr)
	}
	return nil
}
