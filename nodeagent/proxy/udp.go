package proxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// UDPIdleTimeout ends a UDP flow (client address -> endpoint) after this
// long without packets in either direction, as conntrack's UDP timeout
// (30 s) ends kube-proxy's.
const UDPIdleTimeout = 30 * time.Second

// udpFlow relays one client's datagrams to one endpoint.
type udpFlow struct {
	endpoint string // "ip:port"
	up       net.Conn
	last     time.Time // last packet either way; serveUDP's mu must be held
	dead     atomic.Bool
}

// kill ends the flow: its next datagram from the client starts a new one
// (as kube-proxy's conntrack cleanup of a removed UDP endpoint).
func (f *udpFlow) kill() {
	f.dead.Store(true)
	f.up.Close()
}

// serveUDP relays datagrams on pc: each new client address is assigned an
// endpoint (pick: affinity, else round-robin) for the life of its flow;
// replies go back from pc. Without endpoints, datagrams are dropped.
func (p *Proxy) serveUDP(pc net.PacketConn, sp *servicePort, external bool) {
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
		ckey := client.String()
		mu.Lock()
		f := flows[ckey]
		if f != nil && f.dead.Load() {
			delete(flows, ckey)
			f = nil
		}
		if f != nil {
			f.last = time.Now()
		}
		mu.Unlock()
		if f == nil {
			f = p.newUDPFlow(pc, sp, client, external, &mu, flows)
			if f == nil {
				continue
			}
		}
		if _, err := f.up.Write(buf[:n]); err != nil {
			p.log.Debug("udp write to endpoint failed", "service", sp.key, "err", err)
			continue
		}
		sp.m.bytesIn.Add(float64(n))
	}
}

// newUDPFlow opens a flow from client to the first endpoint pick gives
// that can be dialled, registers it in flows and in sp (so that it is
// dropped when its endpoint goes), and starts relaying its replies. It
// returns nil when there is no endpoint.
func (p *Proxy) newUDPFlow(pc net.PacketConn, sp *servicePort, client net.Addr, external bool, mu *sync.Mutex, flows map[string]*udpFlow) *udpFlow {
	var f *udpFlow
	var cand [maxDialAttempts]target
	eps := sp.pick(cand[:0], client, external)
	if len(eps) == 0 {
		sp.m.noEndpts.Inc()
		return nil
	}
	if !p.acquire() {
		sp.m.limit.Inc()
		return nil
	}
	for _, b := range eps {
		addr := b.addr
		up, err := net.Dial("udp", addr)
		if err != nil {
			sp.m.dialErrs.Inc()
			p.log.Debug("dial udp endpoint failed", "service", sp.key, "endpoint", addr, "err", err)
			continue
		}
		f = &udpFlow{endpoint: addr, up: up, last: time.Now()}
		break
	}
	if f == nil {
		p.release()
		return nil
	}
	// Register with sp first: a backend change from now on drops the flow;
	// one that came between pick and here is caught by the check below.
	sp.flowsMu.Lock()
	sp.flows[f] = struct{}{}
	sp.flowsMu.Unlock()
	if bs := sp.backends.Load(); bs == nil || !bs.serving[f.endpoint] {
		sp.flowsMu.Lock()
		delete(sp.flows, f)
		sp.flowsMu.Unlock()
		f.up.Close()
		p.release()
		sp.m.noEndpts.Inc()
		return nil
	}
	sp.chose(client, f.endpoint)
	sp.m.conns.Inc()
	sp.m.active.Inc()
	ckey := client.String()
	mu.Lock()
	flows[ckey] = f
	mu.Unlock()
	go func() {
		defer func() {
			mu.Lock()
			if flows[ckey] == f {
				delete(flows, ckey)
			}
			mu.Unlock()
			sp.flowsMu.Lock()
			delete(sp.flows, f)
			sp.flowsMu.Unlock()
			f.up.Close()
			sp.m.active.Dec()
			p.release()
		}()
		rbuf := make([]byte, 64<<10)
		for {
			f.up.SetReadDeadline(time.Now().Add(UDPIdleTimeout))
			n, err := f.up.Read(rbuf)
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() && !f.dead.Load() {
					mu.Lock()
					idle := time.Since(f.last) >= UDPIdleTimeout
					mu.Unlock()
					if !idle {
						continue
					}
				}
				if f.dead.Load() {
					return
				}
				// A refused reply (ICMP port unreachable) ends the flow too,
				// so that the next datagram picks another endpoint.
				f.dead.Store(true)
				return
			}
			if f.dead.Load() {
				return // no reply from an endpoint that left
			}
			mu.Lock()
			f.last = time.Now()
			mu.Unlock()
			if _, err := pc.WriteTo(rbuf[:n], client); err != nil {
				return
			}
			sp.m.bytesOut.Add(float64(n))
		}
	}()
	return f
}
