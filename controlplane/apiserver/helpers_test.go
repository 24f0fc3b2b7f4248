package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orca-edge/orca/controlplane/security"
	"github.com/orca-edge/orca/controlplane/security/securitytest"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// env is a running apiserver on a real loopback listener over an embedded
// NATS server, serving HTTPS with the chain orca-server runs
// (controlplane/security): e.http and e.kubeconfig are the admin's (client
// certificate CN=system:admin O=system:masters).
type env struct {
	t          testing.TB
	url        string // https://127.0.0.1:<port>
	nc         *nats.Conn
	st         *store.Store
	srv        *Server
	http       *http.Client
	stream     *http.Client // e.http without its timeout, for watches and log streams
	sec        *securitytest.Env
	kubeconfig string // the admin's, for kubectl --kubeconfig
}

// envSettings are what envOptions edit.
type envSettings struct {
	cfg  Config
	scfg store.Config
	sec  []func(*security.Options)
	// saTokens: the apiserver issues ServiceAccount tokens (and pods get
	// the kube-api-access volume), as orca-server's.
	saTokens bool
}

type envOption func(*envSettings)

// withWatchCache sets the store's watch cache size (events kept for resume).
func withWatchCache(n int) envOption {
	return withStoreConfig(func(sc *store.Config) { sc.WatchCacheEvents = n })
}

// withStoreConfig edits the store Config.
func withStoreConfig(f func(*store.Config)) envOption {
	return func(s *envSettings) { f(&s.scfg) }
}

// withConfig edits the apiserver Config.
func withConfig(f func(*Config)) envOption {
	return func(s *envSettings) { f(&s.cfg) }
}

// withServiceAccountTokens makes the apiserver issue ServiceAccount
// tokens as orca-server's does (off by default: pods created through the
// API then get the kube-api-access volume, which an in-process agent
// without tokens and ConfigMap kube-root-ca.crt cannot mount).
func withServiceAccountTokens() envOption {
	return func(s *envSettings) { s.saTokens = true }
}

// withSecurity edits the security options (orca-server's flags) the
// env's chain is built from.
func withSecurity(f func(*security.Options)) envOption {
	return func(s *envSettings) { s.sec = append(s.sec, f) }
}

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	var set envSettings
	for _, o := range opts {
		o(&set)
	}
	cfg, scfg := set.cfg, set.scfg
	ns := storetest.StartNATS(t)
	nc, st := storetest.Connect(t, ns.ClientURL(), func(c *store.Config) { *c = scfg })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg.Store, cfg.NATS, cfg.Addr = st, nc, addr
	sec := securitytest.New(t, set.sec...)
	ch := sec.Chain(st)
	if cfg.TLS == nil {
		cfg.TLS = ch.TLS
	}
	if cfg.Authenticator == nil {
		cfg.Authenticator = ch.Authenticator
	}
	if cfg.Authorizer == nil {
		cfg.Authorizer, cfg.RuleResolver, cfg.RBAC = ch.Authorizer, ch.RuleResolver, ch.RBAC
	}
	if set.saTokens && cfg.ServiceAccountTokens == nil {
		cfg.ServiceAccountTokens = ch.ServiceAccountTokens
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	storetest.RunUntilCleanup(t, srv.Run)
	e := &env{t: t, url: "https://" + addr, nc: nc, st: st, srv: srv, http: sec.AdminClient(), sec: sec}
	e.stream = &http.Client{Transport: e.http.Transport}
	e.kubeconfig = sec.Kubeconfig(e.url, nil)
	storetest.Eventually(t, 10*time.Second, func() error {
		resp, err := e.http.Get(e.url + "/api/v1/namespaces/default")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("default namespace: %d", resp.StatusCode)
		}
		return nil
	})
	return e
}

// do sends a request; body may be nil, []byte, string or a value to encode as JSON.
func (e *env) do(method, path, contentType string, body any) (int, []byte) {
	e.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	case string:
		r = bytes.NewReader([]byte(b))
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.url+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// must sends a request and fails the test unless it answers want.
func (e *env) must(want int, method, path, contentType string, body any, into any) {
	e.t.Helper()
	code, out := e.do(method, path, contentType, body)
	if code != want {
		e.t.Fatalf("%s %s: got %d, want %d: %s", method, path, code, want, out)
	}
	if into != nil {
		if err := json.Unmarshal(out, into); err != nil {
			e.t.Fatalf("%s %s: decode: %v: %s", method, path, err, out)
		}
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// doAccept sends a GET-style request without a body and with an Accept header.
func (e *env) doAccept(method, path, accept string) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}
