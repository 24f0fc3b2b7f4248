package proxy

import (
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// listenConfig returns the configuration of Service listeners: SO_REUSEPORT
// set before bind, so that the agents of one host share each address (see
// listen.go for what that means for TCP, UDP and safety), and, with
// freebind, IP_FREEBIND (IPV6_FREEBIND) so that an address not (yet) on
// this node can be bound.
func listenConfig(freebind bool) *net.ListenConfig {
	return &net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		return setSockopts(network, address, c, freebind)
	}}
}

func setSockopts(network, address string, c syscall.RawConn, freebind bool) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		if serr != nil {
			serr = fmt.Errorf("set SO_REUSEPORT on %s %s: %w", network, address, serr)
			return
		}
		if freebind {
			if network == "tcp6" || network == "udp6" {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
			} else {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
			}
			if serr != nil {
				serr = fmt.Errorf("set IP_FREEBIND on %s %s: %w", network, address, serr)
			}
		}
	}); err != nil {
		return err
	}
	return serr
}
