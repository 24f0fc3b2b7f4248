// Package nodeapi is the small NATS protocol between the control plane and
// node agents for what does not go through the store: reading a container's
// log, and the two-way streams of exec, attach and port-forward
// (stream.go). (The kubelet's HTTPS port plays this part in Kubernetes; over NATS an
// agent behind NAT is reachable too.)
//
// # Logs
//
// The requester (the apiserver) subscribes to a fresh inbox and sends a
// LogRequest to LogsSubject(node) with that inbox as the reply subject.
// Once it has found the log, the agent publishes an empty data message
// (so that a Follow of a quiet log does not look like an agent that does
// not answer), then the log as data messages of at most MaxChunk bytes
// of log text, then one trailer: an empty message with
// header Orca-EOF ends the stream; one with header Orca-Error carries an
// error text (and Orca-Status its HTTP status, "404", "400") and ends it
// too. NATS' no-responders reply (header Status 503) means no agent serves
// the node.
//
// Core NATS has no back-pressure: a publisher faster than its subscriber
// makes the subscriber's client drop messages (a slow consumer), and the
// log would arrive short. So a stream is flow-controlled with credit, as
// TCP's window, and numbered, so that a loss is seen:
//
//   - Every message of the stream, trailer included, carries header
//     Orca-Seq: 1, 2, 3, ...
//   - The requester publishes to LogRequest.AckSubject the Orca-Seq of the
//     last message it has delivered to its own client, as the decimal
//     payload: after each message, and again every AckTimeout/3 while the
//     stream is open (a keepalive, so that a client that reads slowly does
//     not look like a requester that is gone).
//   - The agent keeps at most LogRequest.Window data messages published and
//     not acknowledged: at most Window*MaxChunk bytes in flight, which the
//     requester's subscription holds without dropping. When the window is
//     full it waits for an ack; when none (nor a keepalive) comes within
//     LogRequest.AckTimeout it ends the stream with an Orca-Error.
//   - A message whose Orca-Seq is not the next one, or any message the
//     requester's subscription dropped, means part of the log was lost:
//     the stream fails with ErrLost, never ends as a shorter success. (The
//     apiserver then aborts the HTTP response, so kubectl reports an
//     error.) A non-Follow stream that sends nothing for AckTimeout fails
//     with ErrStalled, so a lost trailer cannot hang the requester.
//
// For compatibility across versions, a request with Window 0 (an older
// requester) is answered without waiting for acks, and a stream whose
// messages have no Orca-Seq (an older agent) is accepted, with only the
// subscription's drops detected.
//
// The requester publishes any message to LogRequest.CancelSubject when its
// client leaves (or it gives up); the agent then stops the stream.
//
// LogStream is the requester's side of this protocol, LogSender the
// agent's.
package nodeapi

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nats-io/nuid"

	"github.com/orca-edge/orca/controlplane/store"
)

// LogsSubject is the subject node agents serve log requests on:
// "orca.node.<node>.logs", the node name escaped as one NATS token
// (store.EncodeName), so node "a.b" never matches node "a"'s subjects or
// NATS permissions.
func LogsSubject(node string) string { return NodeSubjectPrefix(node) + "logs" }

// NodeSubjectPrefix is "orca.node.<node>.": every subject under it is for
// node's agent, which alone (with the control plane) may subscribe there.
func NodeSubjectPrefix(node string) string { return "orca.node." + store.EncodeName(node) + "." }

// ReplyInbox returns a fresh subject "orca.reply.<node>.<unique>" for the
// answers of node's agent to a request of the control plane: a node's NATS
// user may publish only under its own "orca.reply.<node>." and nobody but
// the control plane may subscribe there.
func ReplyInbox(node string) string {
	return "orca.reply." + store.EncodeName(node) + "." + nuid.Next()
}

// controlInbox returns a fresh subject under NodeSubjectPrefix for the
// requester's acks and cancels, which node's agent subscribes to.
func controlInbox(node string) string { return NodeSubjectPrefix(node) + "ctl." + nuid.Next() }

// Header names used in the log stream.
const (
	HeaderEOF   = "Orca-EOF"
	HeaderError = "Orca-Error"
	// HeaderStatus carries the HTTP status for an error: "404", "400".
	HeaderStatus = "Orca-Status"
	// HeaderSeq numbers the messages of a stream from 1.
	HeaderSeq = "Orca-Seq"
)

// Flow control parameters (see the package doc).
const (
	// MaxChunk is the most log bytes in one data message (NATS' default
	// max payload is 1 MiB).
	MaxChunk = 64 << 10
	// DefaultWindow is the Window LogStream asks for: 16 messages, at most
	// 1 MiB in flight.
	DefaultWindow = 16
	// DefaultAckTimeout is the AckTimeout LogStream asks for, and the one
	// an agent applies to a request that sets a Window but no AckTimeout.
	DefaultAckTimeout = 30 * time.Second
)

// LogRequest asks for one container's log.
type LogRequest struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// Container; "" means the pod's only container.
	Container string `json:"container,omitempty"`
	// Follow keeps the stream open and sends new lines as they are written.
	Follow bool `json:"follow,omitempty"`
	// TailLines, when > 0, starts at that many lines from the end.
	TailLines int64 `json:"tailLines,omitempty"`
	// Previous asks for the previous (terminated) attempt's log.
	Previous bool `json:"previous,omitempty"`
	// Timestamps prefixes each line with its RFC3339Nano time.
	Timestamps bool `json:"timestamps,omitempty"`
	// SinceTime, when set, skips lines written before it.
	SinceTime *time.Time `json:"sinceTime,omitempty"`
	// LimitBytes, when > 0, stops after that many bytes.
	LimitBytes int64 `json:"limitBytes,omitempty"`
	// CancelSubject is where the requester publishes to end the stream.
	CancelSubject string `json:"cancelSubject,omitempty"`

	// Window is the most data messages the agent may have published and
	// not seen acknowledged on AckSubject; 0 turns flow control off.
	Window int `json:"window,omitempty"`
	// AckSubject is where the requester publishes its acks.
	AckSubject string `json:"ackSubject,omitempty"`
	// AckTimeout is how long an agent with a full window waits for an ack
	// before it ends the stream with an error, and how long a requester
	// waits for a non-Follow stream's next message; 0 means
	// DefaultAckTimeout. In JSON, nanoseconds.
	AckTimeout time.Duration `json:"ackTimeout,omitempty"`
}

// ackTimeout is r.AckTimeout or its default.
func (r LogRequest) ackTimeout() time.Duration {
	if r.AckTimeout > 0 {
		return r.AckTimeout
	}
	return DefaultAckTimeout
}

// NotARequest reports whether m cannot be a request of a node API (logs,
// streams, the API relay): it has no reply subject, or its reply subject
// is JetStream's ($JS.ACK..., $JS.FC...). A client that may read a stream
// can have nats-server deliver that stream's messages to any subject (a
// push consumer's deliver subject is not checked against its creator's
// permissions), with such replies; they are dropped, never served.
func NotARequest(m *nats.Msg) bool {
	return m.Reply == "" || strings.HasPrefix(m.Reply, "$JS.")
}

// NodeInboxPrefix is the inbox prefix of node's agent: "_INBOX_<node>",
// the node name escaped as in keys (store.EncodeName), so node "a.b"
// ("_INBOX_a_b") never shares a prefix with node "a". A node's NATS user
// may subscribe only below it; every subject a node names for the
// control plane to publish to (relay replies, stream peers) must be below
// it (NodeInbox), else the control plane, which may publish anywhere,
// could be made to write where the node may not (a KV key).
func NodeInboxPrefix(node string) string { return "_INBOX_" + store.EncodeName(node) }

// NewNodeInbox returns a fresh inbox subject of node (below
// NodeInboxPrefix), whatever inbox prefix the connection has.
func NewNodeInbox(node string) string { return NodeInboxPrefix(node) + "." + nuid.Next() }

// NodeInbox reports whether subject is below node's inbox prefix.
func NodeInbox(node, subject string) bool {
	return strings.HasPrefix(subject, NodeInboxPrefix(node)+".") && !strings.ContainsAny(subject, " \t\r\n")
}
