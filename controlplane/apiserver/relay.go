package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	nodeauth "github.com/orca-edge/orca/controlplane/auth/node"
	"github.com/orca-edge/orca/controlplane/nodeapi"
)

// RelayQueue is the NATS queue group the apiservers serve the API relay
// in: each request is served by one of them.
const RelayQueue = "orca-apiserver"

// DefaultMaxRelayRequestsPerNode bounds the relay requests of one node
// served at once; one more is answered 429 at once. Orca's own bound (the
// kubelet's clientset has a client-side QPS instead).
const DefaultMaxRelayRequestsPerNode = 32

// NodeUser returns the identity of node's relay requests: user
// system:node:<node>, groups system:nodes and system:authenticated.
func NodeUser(node string) user.Info {
	return &user.DefaultInfo{Name: nodeauth.UserPrefix + node, Groups: []string{nodeauth.Group, user.AllAuthenticated}}
}

// relayUserKey holds, in a relayed request's context, the node user the
// relay identified from the subject. Only ServeRelay sets it: no HTTP
// request can carry it.
type relayUserKey struct{}

// RelayUser returns the node user of a request that came over the relay.
func RelayUser(ctx context.Context) (user.Info, bool) {
	u, ok := ctx.Value(relayUserKey{}).(user.Info)
	return u, ok
}

// relayLimiter counts the relay requests in flight per node.
type relayLimiter struct {
	max int
	mu  sync.Mutex
	n   map[string]int // node -> requests in flight; mu guards it
}

func (l *relayLimiter) acquire(node string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[node] >= l.max {
		return false
	}
	l.n[node]++
	return true
}

func (l *relayLimiter) release(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[node]--; l.n[node] <= 0 {
		delete(l.n, node)
	}
}

// ServeRelay serves the API relay (controlplane/nodeapi) on the server's
// NATS connection, in queue group RelayQueue, until ctx ends: each request
// is served by the same handler (and so the same chain: limits,
// authentication, audit, authorization, admission) as HTTPS, as the user
// NodeUser(node) of its subject. A node has at most
// DefaultMaxRelayRequestsPerNode requests served at once (429 beyond);
// watches are refused (400). Run calls it; tests that serve Handler()
// themselves call it too. It fails when the server has no NATS
// connection or the subscription fails.
func (s *Server) ServeRelay(ctx context.Context) error {
	if s.nc == nil {
		return fmt.Errorf("apiserver: the API relay needs a NATS connection")
	}
	lim := &relayLimiter{max: DefaultMaxRelayRequestsPerNode, n: map[string]int{}}
	sub, err := s.nc.QueueSubscribe(nodeapi.RelaySubjectPrefix+"*", RelayQueue, func(m *nats.Msg) {
		if nodeapi.NotARequest(m) {
			return
		}
		node, ok := nodeapi.RelayNode(m.Subject)
		if !ok || !nodeapi.NodeInbox(node, m.Reply) {
			// This connection may publish anywhere: answer only below
			// the node's own inbox, never where the sender chose (a KV
			// key, another node's subjects).
			s.log.Debug("API relay: dropped a request whose reply subject is not the node's inbox", "subject", m.Subject, "reply", m.Reply)
			return
		}
		req, err := nodeapi.ParseRelayRequest(m)
		if err != nil {
			relayError(s.nc, m, apierrors.NewBadRequest(err.Error()))
			return
		}
		if !lim.acquire(req.Node) {
			e := apierrors.NewTooManyRequests(fmt.Sprintf("node %s has %d API relay requests in flight, the most served at once", req.Node, lim.max), 1)
			relayError(s.nc, m, e)
			return
		}
		go func() {
			defer lim.release(req.Node)
			s.serveRelayRequest(ctx, m, req)
		}()
	})
	if err != nil {
		return fmt.Errorf("apiserver: serve the API relay: %w", err)
	}
	go func() {
		<-ctx.Done()
		sub.Unsubscribe()
	}()
	return nil
}

// serveRelayRequest runs one relayed request through the HTTP handler and
// replies with its response.
func (s *Server) serveRelayRequest(ctx context.Context, m *nats.Msg, rr *nodeapi.RelayRequest) {
	u, err := url.ParseRequestURI(rr.Path)
	if err != nil || !strings.HasPrefix(u.Path, "/") || u.Host != "" {
		relayError(s.nc, m, apierrors.NewBadRequest(fmt.Sprintf("relay request path %q is not an absolute path", rr.Path)))
		return
	}
	if isLongRunning(&http.Request{Method: rr.Method, URL: u}) || strings.Contains(u.Path, "/watch/") {
		// Their replies would never end: the relay answers once.
		relayError(s.nc, m, apierrors.NewBadRequest("watches, pod logs and pod streams are not served over the API relay"))
		return
	}
	nu := NodeUser(rr.Node)
	rctx := context.WithValue(ctx, relayUserKey{}, nu)
	rctx = request.WithUser(rctx, nu)
	req, err := http.NewRequestWithContext(rctx, rr.Method, u.String(), bytes.NewReader(rr.Body))
	if err != nil {
		relayError(s.nc, m, apierrors.NewBadRequest(fmt.Sprintf("relay request %s %s: %v", rr.Method, rr.Path, err)))
		return
	}
	req.RemoteAddr = "nats:" + rr.Node
	req.RequestURI = u.RequestURI()
	req.Host = "apirelay"
	if rr.ContentType != "" {
		req.Header.Set("Content-Type", rr.ContentType)
	}
	if rr.Accept != "" {
		req.Header.Set("Accept", rr.Accept)
	}
	w := &relayResponseWriter{header: http.Header{}, limit: s.nc.MaxPayload()}
	s.e.ServeHTTP(w, req)
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if w.over {
		relayError(s.nc, m, apierrors.NewInternalError(fmt.Errorf("the response to %s %s is %d bytes; the API relay carries at most %d (the NATS server's max_payload)", rr.Method, rr.Path, w.size, w.limit)))
		return
	}
	if err := nodeapi.RelayReply(m, s.nc, w.code, w.header.Get("Content-Type"), w.body.Bytes()); err != nil {
		s.log.Debug("relay reply failed", "node", rr.Node, "method", rr.Method, "path", rr.Path, "err", err)
	}
}

// relayError replies to m with err as a Status.
func relayError(nc *nats.Conn, m *nats.Msg, err *apierrors.StatusError) {
	st := err.Status()
	st.Kind, st.APIVersion = "Status", "v1"
	body, _ := json.Marshal(&st)
	nodeapi.RelayReply(m, nc, int(st.Code), "application/json", body)
}

// relayResponseWriter buffers one response for the relay. Bytes past
// limit are counted, not kept (the reply is then a 500).
type relayResponseWriter struct {
	header http.Header
	code   int
	body   bytes.Buffer
	size   int64 // bytes written
	limit  int64
	over   bool
}

func (w *relayResponseWriter) Header() http.Header { return w.header }

func (w *relayResponseWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *relayResponseWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.size += int64(len(p))
	if w.over || w.size > w.limit {
		w.over = true
		w.body.Reset()
		return len(p), nil
	}
	return w.body.Write(p)
}

// Flush is a no-op: the response is sent whole.
func (w *relayResponseWriter) Flush() {}
