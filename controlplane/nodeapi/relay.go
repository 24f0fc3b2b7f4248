package nodeapi

// # The API relay
//
// A node agent reaches the apiserver's REST API over NATS, not HTTPS: "the
// relay". One request is one NATS request message to RelaySubject(node):
//
//   - header Orca-Method: the HTTP method (GET, POST, PUT, PATCH, DELETE);
//   - header Orca-Path: the request path with its query
//     ("/api/v1/namespaces/default/pods/web/status?fieldManager=x");
//   - headers Content-Type and Accept as in HTTP; the body is the raw
//     request body (empty for GET and DELETE without options).
//
// The reply carries header Orca-Status (the HTTP status code, "200",
// "403") and Content-Type, and the raw response body (a metav1.Status on
// errors, as over HTTPS). The apiserver serves the relay in a queue group
// and runs each request through the same handler chain as HTTPS with the
// user system:node:<node>, groups system:nodes and system:authenticated:
// the identity is the subject's, and NATS permissions let only that
// node's credentials publish there. A message, request or reply, is at
// most the NATS server's max_payload (1 MiB by default): a larger request
// body is refused by the client with 413, a larger response by the server
// with 500. Watches are not relayed (nodes watch their NATS reads).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/orca-edge/orca/controlplane/store"
)

// RelaySubjectPrefix is the prefix of the relay subjects; the apiserver
// subscribes RelaySubjectPrefix + "*".
const RelaySubjectPrefix = "orca.apirelay."

// RelaySubject is the subject node's agent sends its API requests to:
// "orca.apirelay.<store.EncodeName(node)>", so a node "a.b" has a token
// of its own, distinct from node "a"'s.
func RelaySubject(node string) string { return RelaySubjectPrefix + store.EncodeName(node) }

// RelayNode returns the node a relay subject belongs to; ok is false for
// a subject that is not one.
func RelayNode(subject string) (node string, ok bool) {
	if len(subject) <= len(RelaySubjectPrefix) || subject[:len(RelaySubjectPrefix)] != RelaySubjectPrefix {
		return "", false
	}
	n, err := store.DecodeName(subject[len(RelaySubjectPrefix):])
	if err != nil || n == "" {
		return "", false
	}
	return n, true
}

// Headers of the relay protocol.
const (
	RelayHeaderMethod = "Orca-Method"
	RelayHeaderPath   = "Orca-Path"
	RelayHeaderStatus = "Orca-Status"
)

// DefaultRelayTimeout bounds a relay request whose context has no
// deadline: 30 s.
const DefaultRelayTimeout = 30 * time.Second

// relayHeaderRoom is what a request's subject and headers may take of a
// message, on top of its body.
const relayHeaderRoom = 4096

// RelayResponse is one reply of the relay.
type RelayResponse struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// ContentType is the reply's Content-Type.
	ContentType string
	// Body is the raw response body.
	Body []byte
}

// Relay is the client side of the relay for one node over one NATS
// connection. Safe for concurrent use.
//
// Its replies come to one subscription, made at the first request, on
// "<NewNodeInbox(node)>.*": each request's reply subject is that inbox
// and a token of its own, as nats.go's request multiplexer (one wildcard
// subscription per connection, not a SUB and an UNSUB per request, which
// the NATS server would have to parse and index for every Lease renewal
// of every node).
type Relay struct {
	nc      *nats.Conn
	node    string
	subject string

	mu      sync.Mutex
	sub     *nats.Subscription        // the replies' subscription; nil until the first request (or after a failure)
	inbox   string                    // its subject less the last token, with a trailing "."
	next    uint64                    // the last request's token
	waiting map[string]chan *nats.Msg // reply token -> its request's channel; mu guards it
}

// NewRelay returns the relay client of node over nc. Its replies come to
// node's inbox (NewNodeInbox), whatever inbox prefix nc has: the
// apiserver answers no other reply subject.
func NewRelay(nc *nats.Conn, node string) *Relay {
	return &Relay{nc: nc, node: node, subject: RelaySubject(node), waiting: map[string]chan *nats.Msg{}}
}

// Do sends one request and waits for its reply, until ctx ends or, when
// ctx has no deadline, DefaultRelayTimeout. Errors are apierrors
// StatusErrors: 413 when body does not fit in a NATS message, 503 when no
// apiserver serves the relay (NATS' no-responders) or the connection is
// closed, 504 on a timeout. A reply with an error status is returned as a
// RelayResponse, not an error.
func (r *Relay) Do(ctx context.Context, method, path, contentType string, body []byte) (*RelayResponse, error) {
	if limit := r.nc.MaxPayload() - relayHeaderRoom; int64(len(body)) > limit {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("%s %s: the request body is %d bytes; the relay carries at most %d (the NATS server's max_payload less %d bytes of headers)",
			method, path, len(body), limit, relayHeaderRoom))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultRelayTimeout)
		defer cancel()
	}
	msg := nats.NewMsg(r.subject)
	msg.Header.Set(RelayHeaderMethod, method)
	msg.Header.Set(RelayHeaderPath, path)
	msg.Header.Set("Accept", "application/json")
	if contentType != "" {
		msg.Header.Set("Content-Type", contentType)
	}
	msg.Data = body
	reply, err := r.request(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("%s %s: no apiserver serves the API relay (%s)", method, path, r.subject))
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return nil, apierrors.NewTimeoutError(fmt.Sprintf("%s %s: no reply on the API relay", method, path), 1)
	case errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionDraining):
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("%s %s: the NATS connection is closed", method, path))
	case err != nil:
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("%s %s over the API relay: %v", method, path, err))
	}
	code, err := strconv.Atoi(reply.Header.Get(RelayHeaderStatus))
	if err != nil || code < 100 || code > 999 {
		return nil, apierrors.NewInternalError(fmt.Errorf("%s %s: relay reply without a valid %s header (%q)", method, path, RelayHeaderStatus, reply.Header.Get(RelayHeaderStatus)))
	}
	return &RelayResponse{StatusCode: code, ContentType: reply.Header.Get("Content-Type"), Body: reply.Data}, nil
}

// RelayRequest is one request as the apiserver receives it from the relay.
type RelayRequest struct {
	// Node is the sending node (from the subject).
	Node string
	// Method, Path (with query), ContentType, Accept and Body as sent.
	Method, Path, ContentType, Accept string
	Body                              []byte
}

// ParseRelayRequest reads a relay request message; a message without a
// node subject or a method/path header is an error.
func ParseRelayRequest(m *nats.Msg) (*RelayRequest, error) {
	node, ok := RelayNode(m.Subject)
	if !ok {
		return nil, fmt.Errorf("subject %q is not a relay subject %s<node>", m.Subject, RelaySubjectPrefix)
	}
	if m.Header == nil || m.Header.Get(RelayHeaderMethod) == "" || m.Header.Get(RelayHeaderPath) == "" {
		return nil, fmt.Errorf("relay request of node %s without %s and %s headers", node, RelayHeaderMethod, RelayHeaderPath)
	}
	return &RelayRequest{Node: node, Method: m.Header.Get(RelayHeaderMethod), Path: m.Header.Get(RelayHeaderPath),
		ContentType: m.Header.Get("Content-Type"), Accept: m.Header.Get("Accept"), Body: m.Data}, nil
}

// RelayReply answers a relay request message m with code, contentType and
// body. A body that does not fit in a NATS message is replaced by a 500
// Status that says so.
func RelayReply(m *nats.Msg, nc *nats.Conn, code int, contentType string, body []byte) error {
	if limit := nc.MaxPayload() - relayHeaderRoom; int64(len(body)) > limit {
		code, contentType = http.StatusInternalServerError, "application/json"
		body = fmt.Appendf(nil, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the response is %d bytes; the API relay carries at most %d (the NATS server's max_payload)","reason":"InternalError","code":500}`,
			len(body), limit)
	}
	reply := nats.NewMsg(m.Reply)
	reply.Header.Set(RelayHeaderStatus, strconv.Itoa(code))
	if contentType != "" {
		reply.Header.Set("Content-Type", contentType)
	}
	reply.Data = body
	return nc.PublishMsg(reply)
}

// request publishes msg with a fresh reply subject of the node's inbox
// and waits for the one reply, as nats.Conn.RequestMsgWithContext (NATS'
// no-responders status is nats.ErrNoResponders).
func (r *Relay) request(ctx context.Context, msg *nats.Msg) (*nats.Msg, error) {
	token, ch, err := r.expect()
	if err != nil {
		return nil, err
	}
	defer r.forget(token)
	msg.Reply = r.inbox + token
	if err := r.nc.PublishMsg(msg); err != nil {
		return nil, err
	}
	select {
	case m := <-ch:
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
			return nil, nats.ErrNoResponders
		}
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// expect registers a new reply token and its channel (buffer 1),
// subscribing to the replies first when the relay has no subscription.
func (r *Relay) expect() (string, chan *nats.Msg, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub == nil || !r.sub.IsValid() {
		inbox := NewNodeInbox(r.node) + "."
		sub, err := r.nc.Subscribe(inbox+"*", r.deliver)
		if err != nil {
			return "", nil, err
		}
		r.sub, r.inbox = sub, inbox
	}
	r.next++
	token := strconv.FormatUint(r.next, 36)
	ch := make(chan *nats.Msg, 1)
	r.waiting[token] = ch
	return token, ch, nil
}

// forget drops token's channel: its request got its reply or gave up.
func (r *Relay) forget(token string) {
	r.mu.Lock()
	delete(r.waiting, token)
	r.mu.Unlock()
}

// deliver hands a reply to the request waiting for it; a reply nobody
// waits for any more (its request timed out, a second reply) is dropped.
func (r *Relay) deliver(m *nats.Msg) {
	token := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	r.mu.Lock()
	ch, ok := r.waiting[token]
	if ok {
		delete(r.waiting, token)
	}
	r.mu.Unlock()
	if ok {
		ch <- m
	}
}
