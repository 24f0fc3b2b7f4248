package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// listenRetryMax caps the back-off between syncs of a Service whose
// listeners could not all be opened: the first retry comes after 5 ms,
// doubling up to this.
const listenRetryMax = 30 * time.Second

// listen opens sp's listener on addr, TCP or UDP after sp.protocol, shared
// with the other agents of the host (see the package doc), and starts
// serving it. An address another service port of this proxy holds is
// refused: SO_REUSEPORT would let the bind succeed and balance one address
// over two Services. Errors name the service port, the address and the
// reason. External listeners (externalIPs, LoadBalancer ingress IPs) are
// bound with IP_FREEBIND on Linux: the address may not be on this node
// (yet); traffic arrives once it is. p.mu must be held.
func (p *Proxy) listen(ctx context.Context, sp *servicePort, addr string, external bool) (*listener, error) {
	network := "tcp"
	if sp.protocol == corev1.ProtocolUDP {
		network = "udp"
	}
	if other := p.holder(sp.protocol, addr); other != nil {
		return nil, fmt.Errorf("service port %s: listen %s %s: address already used by service port %s", sp.key, network, addr, other.key)
	}
	lc := listenConfig(external && !p.isNodePortAddr(addr))
	if sp.protocol == corev1.ProtocolUDP {
		pc, err := lc.ListenPacket(ctx, network, addr)
		if err != nil {
			return nil, fmt.Errorf("service port %s: %w", sp.key, err)
		}
		go p.serveUDP(pc, sp, external)
		return &listener{Closer: pc, external: external}, nil
	}
	l, err := lc.Listen(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("service port %s: %w", sp.key, err)
	}
	go p.serve(ctx, l, sp, external)
	return &listener{Closer: l, external: external}, nil
}

// isNodePortAddr reports whether addr is on the NodePort address.
func (p *Proxy) isNodePortAddr(addr string) bool {
	h, _, _ := net.SplitHostPort(addr)
	return p.cfg.NodePortAddress != "" && h == p.cfg.NodePortAddress
}

// holder returns the service port with a listener of protocol on addr, or
// nil. p.mu must be held.
func (p *Proxy) holder(protocol corev1.Protocol, addr string) *servicePort {
	for _, sp := range p.ports {
		if _, ok := sp.listeners[addr]; ok && sp.protocol == protocol {
			return sp
		}
	}
	return nil
}

// acceptBackoff returns the pause after a failed Accept or ReadFrom that
// followed a pause of last: 5 ms, doubling up to 1 s, as net/http's Server.
func acceptBackoff(last time.Duration) time.Duration {
	if last == 0 {
		return 5 * time.Millisecond
	}
	return min(2*last, time.Second)
}

// isClosed reports whether err is the error of a listener closed by Close.
func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) }
