package natsauth_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orca-edge/orca/controlplane/auth/natsauth"
	"github.com/orca-edge/orca/controlplane/nodeapi"
)

// A node may create a push consumer on a stream it reads and have the
// server deliver it to any subject, another node's relay subject
// included: nats-server does not check deliver_subject against the
// creator's permissions. What reaches the relay that way must not pass
// for a relay request of the other node: it has none of the relay's
// headers (ParseRelayRequest refuses it) and its reply subject is
// JetStream's, not the other node's inbox.
func TestAttackDeliverSubjectToAnotherNodesRelay(t *testing.T) {
	b := newBed(t)
	cp := b.cp.Conn()
	got := make(chan *nats.Msg, 16)
	sub, err := cp.ChanSubscribe(natsauth.RelaySubject("b"), got)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := cp.Flush(); err != nil {
		t.Fatal(err)
	}
	nc := b.connect(t, natsauth.Node("a", time.Hour))
	req, _ := json.Marshal(map[string]any{"stream_name": "KV_services", "config": map[string]any{
		"name": "redirect", "deliver_policy": "all", "ack_policy": "none", "deliver_subject": natsauth.RelaySubject("b")}})
	resp, err := nc.Request("$JS.API.CONSUMER.CREATE.KV_services.redirect", req, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(resp.Data), `"error"`) {
		return // nats-server refuses the redirection: nothing more to check
	}
	select {
	case m := <-got:
		if _, err := nodeapi.ParseRelayRequest(m); err == nil {
			t.Fatalf("a delivered KV message parsed as node b's relay request: %v %s", m.Header, m.Data)
		}
		if strings.HasPrefix(m.Reply, natsauth.NodeInboxPrefix("b")+".") {
			t.Fatalf("delivered message with node b's inbox as reply: %q", m.Reply)
		}
	case <-time.After(10 * time.Second):
		// Not delivered at all: also fine.
	}
}
