package dns

import (
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// BenchmarkQuery: a Service A query over UDP on loopback, one client
// socket per goroutine (b.RunParallel), against 1,000 Services.
func BenchmarkQuery(b *testing.B) {
	s := storetest.NewStore(b)
	srv := startServer(b, Config{Store: s, Upstreams: []string{}})
	for i := range 1000 {
		create(b, s, store.Services, svc("default", fmt.Sprintf("svc-%d", i), fmt.Sprintf("10.43.%d.%d", i/250, i%250+1)))
	}
	m := new(dns.Msg)
	m.SetQuestion("svc-999.default.svc.cluster.local.", dns.TypeA)
	storetest.Eventually(b, 30*time.Second, func() error {
		r, _, err := new(dns.Client).Exchange(m, srv.Addr())
		if err != nil || len(r.Answer) != 1 {
			return fmt.Errorf("answers %v, %v", r, err)
		}
		return nil
	})
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		conn, err := dns.Dial("udp", srv.Addr())
		if err != nil {
			b.Error(err)
			return
		}
		defer conn.Close()
		q := m.Copy()
		for pb.Next() {
			q.Id = dns.Id()
			if err := conn.WriteMsg(q); err != nil {
				b.Error(err)
				return
			}
			r, err := conn.ReadMsg()
			if err != nil || len(r.Answer) != 1 {
				b.Errorf("answer %v, %v", r, err)
				return
			}
		}
	})
}
