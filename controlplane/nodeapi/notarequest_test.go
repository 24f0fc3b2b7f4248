package nodeapi_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/orca-edge/orca/controlplane/nodeapi"
)

// A message nats-server delivered from a stream (a push consumer's
// deliver subject may be any subject) is never served as a request.
func TestNotARequest(t *testing.T) {
	for reply, want := range map[string]bool{
		"":                                       true,
		"$JS.ACK.KV_services.redirect.1.2.3.4.5": true,
		"$JS.FC.KV_services.x.y":                 true,
		"_INBOX_n1.abc":                          false,
		"orca.reply.n1.xyz":                      false,
	} {
		if got := nodeapi.NotARequest(&nats.Msg{Subject: "orca.apirelay.n1", Reply: reply}); got != want {
			t.Errorf("reply %q: NotARequest %v, want %v", reply, got, want)
		}
	}
}
