package proxy

import (
	"net"
	"sync"
	"time"
)

// UDPIdleTimeout ends a UDP flow (client address -> endpoint) after this
// long without packets in either direction, as conntrack's UDP timeout
// (30 s) ends kube-proxy's.
const UDPIdleTimeout = 30 * time.Second

// udpFlow relays one client's datagrams to one endpoint.
type udpFlow struct {
	up   net.Conn
	last time.Time // last packet either way; serveUDP's mu must be held
}

// serveUDP relays datagrams on pc: each new client address is assigned the
// next endpoint (round-robin) for the life of its flow; replies go back
// from pc. Without endpoints, datagrams are dropped.
func (p *Proxy) serveUDP(pc net.PacketConn, sp *servicePort) {
	var mu sync.Mutex // guards flows and each flow's last
	flows := map[string]*udpFlow{}
	defer func() {
		mu.Lock()
		for _, f := range flows {
			f.up.Close()
		}
		mu.Unlock()
	}()
	buf := make([]byte, 64<<10)
	var pause time.Duration
	for {
		n, client, err := pc.ReadFrom(buf)
		if err != nil {
			if isClosed(err) {
				return
			}
			pause = acceptBackoff(pause)
			p.log.Warn("udp read failed, retrying", "port", sp.key, "addr", pc.LocalAddr().String(), "pause", pause, "err", err)
			time.Sleep(pause)
			continue
		}
		pause = 0
		mu.Lock()
		f := flows[client.String()]
		if f != nil {
			f.last = time.Now()
		}
		mu.Unlock()
		if f == nil {
			backends := sp.pick()
			if len(backends) == 0 {
				continue
			}
			up, err := net.Dial("udp", backends[0])
			if err != nil {
				p.log.Debug("dial udp endpoint failed", "service", sp.key, "endpoint", backends[0], "err", err)
				continue
			}
			f = &udpFlow{up: up, last: time.Now()}
			mu.Lock()
			flows[client.String()] = f
			mu.Unlock()
			go func(client net.Addr) {
				defer func() {
					mu.Lock()
					delete(flows, client.String())
					mu.Unlock()
					up.Close()
				}()
				rbuf := make([]byte, 64<<10)
				for {
					up.SetReadDeadline(time.Now().Add(UDPIdleTimeout))
					n, err := up.Read(rbuf)
					if err != nil {
						if ne, ok := err.(net.Error); ok && ne.Timeout() {
							mu.Lock()
							idle := time.Since(f.last) >= UDPIdleTimeout
							mu.Unlock()
							if !idle {
								continue
							}
						}
						return
					}
					mu.Lock()
					f.last = time.Now()
					mu.Unlock()
					if _, err := pc.WriteTo(rbuf[:n], client); err != nil {
						return
					}
				}
			}(client)
		}
		if _, err := f.up.Write(buf[:n]); err != nil {
			p.log.Debug("udp write to endpoint failed", "service", sp.key, "err", err)
		}
	}
}
