// Package apiserver is orca's REST front door: it speaks the Kubernetes API
// (paths, JSON/YAML object shapes, watch, patch, subresources, discovery,
// metav1.Status errors) over the typed store, so that the real kubectl and
// client-go work against orca unchanged.
//
// Routing is done by parsing the request path here (see parsePath) rather
// than by one echo route per resource: Kubernetes paths overlap
// ("/api/v1/namespaces/default" is a namespace, "/api/v1/namespaces/default/pods"
// a list) and the registry (controlplane/registry: one Kind per served
// kind, which may change at run time) drives everything: the handlers are
// generic over it.
package apiserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/orca-edge/orca/controlplane/auth/natsauth"
	"github.com/orca-edge/orca/controlplane/nodeapi"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/nats-io/nats.go"
	"golang.org/x/net/netutil"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/orca-edge/orca/controlplane/auth/audit"
	"github.com/orca-edge/orca/controlplane/auth/inflight"
	"github.com/orca-edge/orca/controlplane/auth/rbac"
	"github.com/orca-edge/orca/controlplane/auth/serviceaccount"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/apiextensions"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/storage"
	"github.com/orca-edge/orca/controlplane/store"
)

// ModulePusher stores a WASM module under a name ("hello-wasm:v1") and
// returns its digest ("sha256:<hex>"). The wasm package implements it.
type ModulePusher interface {
	Push(ctx context.Context, name string, r io.Reader) (digest string, err error)
}

// Config configures the apiserver. Store is required.
type Config struct {
	Store *store.Store
	// Registry holds the kinds served (their rules: defaults, validation,
	// tables, subresources). Default: builtin.New(). Pass the registry the
	// controllers use, so kinds added at run time are seen by both.
	Registry *registry.Registry
	// NATS carries pod log requests to node agents (controlplane/nodeapi).
	// Default: Store.Conn().
	NATS *nats.Conn
	// Addr is the listen address. Default "127.0.0.1:6443".
	Addr string
	// ServiceCIDR is the range ClusterIPs are allocated from (IPv4, at
	// most /30). Default DefaultServiceCIDR, as k3s's --service-cidr. Its
	// first address is the `kubernetes` Service's (KubernetesServiceIP):
	// ClusterIPs allocated dynamically start at the second.
	ServiceCIDR string
	// NodePortRange is the range of Service nodePorts, "lo-hi". Default
	// "30000-32767".
	NodePortRange string
	// Modules stores pushed WASM modules. When nil, module pushes answer
	// 503 ServiceUnavailable.
	Modules ModulePusher
	// Images stores pushed OCI image archives (`orca image push`,
	// /apis/orca.dev/v1/images). When nil, those requests answer 503.
	Images ImageStore
	// NATSCredentials answers NATSCredentialRequests (natscreds.go).
	// When nil, they answer 503.
	NATSCredentials *natsauth.Issuer
	// MaxBodyBytes bounds request bodies; larger ones get 413. Default 3 MiB
	// (Kubernetes' own limit). Module pushes have their own 64 MiB bound.
	MaxBodyBytes int64
	// MaxRequestsInFlight bounds the read-only requests served at once,
	// MaxMutatingRequestsInFlight the mutating ones (kube-apiserver's
	// --max-requests-inflight and --max-mutating-requests-inflight);
	// one more gets 429 with Retry-After. Watches and pod logs are not
	// counted. Defaults 400 and 200.
	MaxRequestsInFlight         int
	MaxMutatingRequestsInFlight int
	// RequestTimeout bounds a request that is not a watch or a log read,
	// its body included (kube-apiserver's --request-timeout). A body not
	// received in time is a 504 Timeout and the connection is closed.
	// Default 60 s. Module pushes get 10 minutes.
	RequestTimeout time.Duration
	// MaxConnections bounds the HTTP connections open at once (watches
	// included); more wait in the kernel's accept queue. Default 4096,
	// which bounds the memory idle and slow connections can take to
	// about 100 MB.
	MaxConnections int
	// LivenessGracePeriod is how long the NATS connection may be down
	// (reconnecting) before /livez fails. /readyz fails at once.
	// Default 30 s.
	LivenessGracePeriod time.Duration
	// Logger receives one debug line per request. Default slog.Default().
	Logger *slog.Logger

	// TLS is the HTTPS configuration of Addr (its certificate; client
	// certificates requested, verified by an x509 Authenticator).
	// Required by Run: the apiserver serves HTTPS only on Addr.
	TLS *tls.Config
	// InsecureAddr, when set, also serves plain HTTP there (still
	// authenticated and authorized: tokens only, as no certificate can be
	// presented). It must be a loopback address ("127.0.0.1:8080"): New
	// fails otherwise.
	InsecureAddr string
	// Authenticator identifies the user of a request (request.UserFrom);
	// a request it does not authenticate is a 401 (see authenticate).
	// Required.
	Authenticator authenticator.Request
	// Authorizer decides on every request after authentication; anything
	// but Allow is a 403. Required.
	Authorizer authorizer.Authorizer
	// RuleResolver lists a user's rules (SelfSubjectRulesReview).
	// Optional.
	RuleResolver authorizer.RuleResolver

	// Audit writes the audit log (controlplane/auth/audit); nil: none.
	Audit *audit.Auditor
	// MaxRequestsInFlightPerUser bounds the requests one user has in
	// flight at once (orca's --max-requests-inflight-per-user), watches
	// and logs excepted; MaxLongRunningRequestsPerUser bounds that user's
	// watches, log reads and streams. One more gets 429 with Retry-After
	// (limitPerUser). Defaults 50 and 200.
	MaxRequestsInFlightPerUser    int
	MaxLongRunningRequestsPerUser int
	// RBAC, when set, refuses writes of Roles, ClusterRoles and
	// bindings that would grant their author permissions they do not
	// hold (Kubernetes' escalation prevention; admission_rbac.go). Nil:
	// no such check (only Authorizer decides).
	RBAC *rbac.Authorizer
	// PodSecurity is the Pod Security admission's configuration
	// (defaults and exemptions; controlplane/auth/podsecurity). Default:
	// podsecurity.DefaultConfiguration() (privileged unless a namespace's
	// labels say otherwise).
	PodSecurity *PodSecurityConfiguration
	// ServiceAccountTokens issues the tokens of serviceaccounts/token
	// (TokenRequest). Nil: that subresource answers 503.
	ServiceAccountTokens *serviceaccount.Issuer
	// Profiling serves Go's profiles under /debug/pprof to users the
	// Authorizer lets get those non-resource URLs (installProfiling), as
	// kube-apiserver's --profiling. Default false.
	Profiling bool
	// Metrics is the process's cache of the agents' usage samples
	// (nodeapi.MetricsBucket), shared with the HorizontalPodAutoscaler
	// controller so the bucket is watched once. Nil: the server's own.
	Metrics *nodeapi.MetricsCache
}

// Server is the REST apiserver. Create it with New.
type Server struct {
	cfg   Config
	st    *store.Store
	nc    *nats.Conn
	e     *echo.Echo
	log   *slog.Logger
	alloc *allocator
	pb    runtime.Decoder // protobuf request bodies

	reqInfo *request.RequestInfoFactory // Kubernetes' path parsing (chain.go)

	reg *registry.Registry // the served kinds
	// fields holds the kinds' field managers (managedfields.go).
	fields *fieldManagers

	openAPIMu      sync.Mutex       // guards the two below
	openAPISvc     *openAPIServices // nil until the first OpenAPI request
	openAPIChanged <-chan struct{}  // closed when openAPISvc is out of date

	readOnly, mutating chan struct{} // in-flight request slots (limitRequests)
	modulePushes       chan struct{} // module pushes in progress (maxModulePushes)
	imagePushes        chan struct{} // image pushes in progress (maxImagePushes)

	// perUser and perUserLongRunning count each user's requests
	// (limitPerUser).
	perUser, perUserLongRunning *inflight.PerUser

	healthMu  sync.Mutex // guards downSince
	downSince time.Time  // when the NATS connection was seen down; zero while up

	metricsCache *nodeapi.MetricsCache // metrics.k8s.io (metrics_api.go): cfg.Metrics or its own

	bootMu sync.Mutex // serializes Bootstrap
}

// New validates cfg, applies defaults and returns a Server. It fails when
// Store is nil or ServiceCIDR/NodePortRange do not parse.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("apiserver: Config.Store is required")
	}
	if cfg.Authenticator == nil || cfg.Authorizer == nil {
		return nil, errors.New("apiserver: Config.Authenticator and Config.Authorizer are required")
	}
	if cfg.InsecureAddr != "" {
		if err := checkLoopback(cfg.InsecureAddr); err != nil {
			return nil, err
		}
	}
	if cfg.NATS == nil {
		cfg.NATS = cfg.Store.Conn()
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:6443"
	}
	if cfg.ServiceCIDR == "" {
		cfg.ServiceCIDR = DefaultServiceCIDR
	}
	if cfg.NodePortRange == "" {
		cfg.NodePortRange = "30000-32767"
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 3 << 20
	}
	if cfg.MaxRequestsInFlight <= 0 {
		cfg.MaxRequestsInFlight = 400
	}
	if cfg.MaxMutatingRequestsInFlight <= 0 {
		cfg.MaxMutatingRequestsInFlight = 200
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 60 * time.Second
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = 4096
	}
	if cfg.LivenessGracePeriod <= 0 {
		cfg.LivenessGracePeriod = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = builtin.New()
	}
	alloc, err := newAllocator(cfg.ServiceCIDR, cfg.NodePortRange)
	if err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	perUser, perUserLongRunning := newPerUserLimits(&cfg)
	pb, err := newProtobufDecoder(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("apiserver: protobuf scheme: %w", err)
	}
	s := &Server{cfg: cfg, st: cfg.Store, nc: cfg.NATS, log: cfg.Logger, alloc: alloc, pb: pb, reg: cfg.Registry, fields: newFieldManagers(cfg.Registry), reqInfo: newRequestInfoFactory(),
		readOnly: make(chan struct{}, cfg.MaxRequestsInFlight), mutating: make(chan struct{}, cfg.MaxMutatingRequestsInFlight),
		perUser: perUser, perUserLongRunning: perUserLongRunning,
		modulePushes: make(chan struct{}, maxModulePushes),
		imagePushes:  make(chan struct{}, maxImagePushes), metricsCache: cfg.Metrics}
	if s.metricsCache == nil {
		s.metricsCache = nodeapi.NewMetricsCache(cfg.Store.JetStream())
	}
	if err := s.installPodSecurity(); err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	s.installRBACAdmission()
	s.installServiceAccountAdmission()
	s.installQuotaAdmission() // admission_quota.go
	s.reg.SetMutatingAdmission(storage.DefaultStorageClassAdmissionName, storage.DefaultStorageClassAdmission(s.listStorageClasses))
	if s.nc != nil {
		s.watchNATS()
	}
	s.e = s.routes()
	return s, nil
}

// Handler returns the HTTP handler (for httptest or an outer mux).
func (s *Server) Handler() http.Handler { return s.e }

// Run bootstraps the default objects, then serves HTTPS on cfg.Addr (and
// plain HTTP on cfg.InsecureAddr when set) until ctx ends, and shuts down
// gracefully (in-flight requests get 5 s; watches are cut). A port
// already in use is reported at once:
// "listen 127.0.0.1:6443: address already in use". Run fails without
// cfg.TLS.
func (s *Server) Run(ctx context.Context) error {
	if s.cfg.TLS == nil {
		return errors.New("apiserver: Config.TLS is required to serve (HTTPS only)")
	}
	ln, err := listen(s.cfg.Addr)
	if err != nil {
		return err
	}
	var insecure net.Listener
	if s.cfg.InsecureAddr != "" {
		if insecure, err = listen(s.cfg.InsecureAddr); err != nil {
			ln.Close()
			return err
		}
	}
	closeAll := func() {
		ln.Close()
		if insecure != nil {
			insecure.Close()
		}
	}
	if err := s.Bootstrap(ctx); err != nil {
		closeAll()
		return err
	}
	s.waitForPolicy(ctx)
	if s.nc != nil {
		if err := s.ServeRelay(ctx); err != nil { // relay.go
			ln.Close()
			return err
		}
	}
	baseCtx, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	// CustomResourceDefinitions: their kinds join the registry once
	// established (registry/apiextensions.Controller).
	crdCtx, stopCRDs := context.WithCancel(ctx)
	defer stopCRDs()
	crds := apiextensions.NewController(s.st, s.reg, s.log)
	go crds.Run(crdCtx, 2)
	select { // so that custom resources do not answer 404 after a restart
	case <-crds.Synced():
	case <-time.After(10 * time.Second):
		s.log.Warn("apiserver: serving before the CustomResourceDefinitions were synced")
	case <-ctx.Done():
	}
	// Headers must arrive within 10 s and an idle keep-alive connection is
	// closed after 90 s; bodies are bounded per request (limitRequests).
	// Each listener holds at most MaxConnections.
	newServer := func() *http.Server {
		return &http.Server{Handler: s.e, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second,
			BaseContext: func(net.Listener) context.Context { return baseCtx }}
	}
	srv := newServer()
	srv.TLSConfig = s.cfg.TLS.Clone()
	errc := make(chan error, 2)
	limited := netutil.LimitListener(ln, s.cfg.MaxConnections)
	go func() { errc <- srv.ServeTLS(limited, "", "") }()
	s.log.Info("apiserver listening", "addr", "https://"+ln.Addr().String())
	servers := []*http.Server{srv}
	if insecure != nil {
		isrv := newServer()
		servers = append(servers, isrv)
		go func() { errc <- isrv.Serve(netutil.LimitListener(insecure, s.cfg.MaxConnections)) }()
		s.log.Warn("apiserver also serving plain HTTP on loopback", "addr", "http://"+insecure.Addr().String())
	}
	select {
	case err := <-errc:
		for _, h := range servers {
			h.Close()
		}
		return fmt.Errorf("apiserver: serve %s: %w", s.cfg.Addr, err)
	case <-ctx.Done():
	}
	cancelBase() // ends watches and log streams
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, h := range servers {
		if err := h.Shutdown(shutCtx); err != nil {
			h.Close()
		}
	}
	return nil
}

// listen opens addr, naming a port in use plainly.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("listen %s: address already in use", addr)
		}
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return ln, nil
}

// checkLoopback fails unless addr's host is a loopback IP or "localhost":
// plain HTTP is only for the machine itself.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("apiserver: insecure address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("apiserver: insecure address %q: plain HTTP is served only on a loopback address (127.0.0.1, ::1)", addr)
	}
	return nil
}

func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		var he *echo.HTTPError
		if errors.As(err, &he) && he.Code == http.StatusNotFound {
			writeError(c, notFoundPath(c.Request().URL.Path))
			return
		}
		writeError(c, err)
	}
	// A panic in a handler is a bug: it becomes a 500 Status and a log
	// line with its stack (Kubernetes' WithPanicRecovery) instead of a
	// dropped connection. http.ErrAbortHandler still aborts a response.
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{
		DisableStackAll: true,
		LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
			s.log.Error("panic serving a request", "method", c.Request().Method, "path", c.Request().URL.Path, "err", err, "stack", string(stack))
			return apierrors.NewInternalError(err)
		},
	}))
	e.Use(s.logRequests, s.limitRequests, s.recordWarnings)
	e.Use(s.chain()...)
	for _, ep := range []string{"healthz", "livez", "readyz"} {
		e.GET("/"+ep, s.health(ep))
		e.GET("/"+ep+"/*", s.health(ep))
	}
	e.GET("/version", s.version)
	if s.cfg.Profiling {
		s.installProfiling(e)
	}
	e.GET("/openapi/v2", s.openAPIV2)
	e.GET("/openapi/v3", s.openAPIRoot)
	e.GET("/openapi/v3/*", s.openAPIGroupVersion)
	e.GET("/api", s.apiVersions)
	e.GET("/api/", s.apiVersions)
	e.GET("/apis", s.apiGroups)
	e.GET("/apis/", s.apiGroups)
	e.Any("/api/*", s.dispatch)
	e.Any("/apis/*", s.dispatch)
	return e
}

// logRequests logs one debug line per request.
func (s *Server) logRequests(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		c.SetRequest(c.Request().WithContext(request.WithReceivedTimestamp(c.Request().Context(), start))) // the audit log's requestReceivedTimestamp
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		s.log.Debug("request", "method", c.Request().Method, "uri", c.Request().RequestURI,
			"status", c.Response().Status, "duration", time.Since(start))
		return nil
	}
}

// reqInfo is what a resource path names.
type reqInfo struct {
	gv        schema.GroupVersion
	kind      *registry.Kind // the kind named; res is its store layout
	res       store.Resource
	namespace string // "" for cluster-scoped or all namespaces
	name      string
	sub       string // subresource: "status", "binding", "log", "scale", "finalize"
	watch     bool   // legacy /watch/ path
}

// parsePath splits a /api/v1/... or /apis/<g>/<v>/... path. It returns
// ok=false with gv set for discovery of a group version (no resource),
// and an error for an unknown resource.
func (s *Server) parsePath(p string) (ri reqInfo, discovery bool, err error) {
	segs := splitPath(p)
	switch {
	case len(segs) >= 2 && segs[0] == "api":
		ri.gv = schema.GroupVersion{Version: segs[1]}
		segs = segs[2:]
	case len(segs) >= 3 && segs[0] == "apis":
		ri.gv = schema.GroupVersion{Group: segs[1], Version: segs[2]}
		segs = segs[3:]
	case len(segs) == 2 && segs[0] == "apis":
		return ri, true, nil // /apis/<group>
	default:
		return ri, false, notFoundPath(p)
	}
	if len(segs) == 0 {
		return ri, true, nil
	}
	if segs[0] == "watch" {
		ri.watch = true
		segs = segs[1:]
	}
	lookup := func(plural string) (*registry.Kind, bool) { return s.reg.Lookup(ri.gv, plural) }
	if len(segs) >= 3 && segs[0] == "namespaces" {
		if k, ok := lookup(segs[2]); ok && k.Namespaced {
			ri.kind, ri.res, ri.namespace = k, k.Resource, segs[1]
			segs = segs[3:]
			if len(segs) > 0 {
				ri.name = segs[0]
			}
			if len(segs) > 1 {
				ri.sub = segs[1]
			}
			if len(segs) > 2 {
				return ri, false, notFoundPath(p)
			}
			return ri, false, nil
		}
	}
	k, ok := lookup(segs[0])
	if !ok {
		return ri, false, notFoundPath(p)
	}
	ri.kind, ri.res = k, k.Resource
	if len(segs) > 1 {
		ri.name = segs[1]
	}
	if len(segs) > 2 {
		ri.sub = segs[2]
	}
	if len(segs) > 3 {
		return ri, false, notFoundPath(p)
	}
	return ri, false, nil
}

// splitPath splits an escaped URL path into unescaped segments.
func splitPath(p string) []string {
	var out []string
	for _, seg := range strings.Split(strings.Trim(p, "/"), "/") {
		if seg == "" {
			continue
		}
		if u, err := url.PathUnescape(seg); err == nil {
			seg = u
		}
		out = append(out, seg)
	}
	return out
}

// dispatch routes a resource request by path and method.
func (s *Server) dispatch(c echo.Context) error {
	req := c.Request()
	p := req.URL.EscapedPath()
	if strings.HasPrefix(p, "/apis/"+orcaGroup+"/") {
		return s.orcaAPI(c)
	}
	if p == "/apis/"+authorizationGroup || strings.HasPrefix(p, "/apis/"+authorizationGroup+"/") {
		return s.authorizationAPI(c)
	}
	if p == "/apis/"+metricsGroup || strings.HasPrefix(p, "/apis/"+metricsGroup+"/") {
		return s.metricsAPI(c)
	}
	if pp, ok := parseProxyPath(p); ok { // pods/proxy, services/proxy
		return s.serveProxy(c, pp)
	}
	ri, disc, err := s.parsePath(p)
	if err != nil {
		return err
	}
	if disc {
		if req.Method != http.MethodGet {
			return apiMethodNotAllowed(req.Method, p)
		}
		return s.discovery(c, ri.gv, splitPath(p))
	}
	if err := checkPathNames(ri); err != nil {
		return err
	}
	if ri.kind.Virtual {
		return s.virtualCreate(c, ri)
	}
	if req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch {
		if err := s.withWriter(c, ri); err != nil {
			return err
		}
	}
	if ri.sub != "" {
		return s.subresource(c, ri)
	}
	switch req.Method {
	case http.MethodGet:
		q := req.URL.Query()
		if ri.name != "" && !ri.watch && q.Get("watch") == "" {
			return s.get(c, ri)
		}
		opts, sel, err := listOptions(ri.kind, q, ri.watch)
		if err != nil {
			return err
		}
		if opts.Watch {
			if ri.name != "" {
				sel.field = fields.AndSelectors(sel.field, fields.OneTermEqualSelector("metadata.name", ri.name))
			}
			return s.watch(c, ri, opts, sel)
		}
		if ri.name != "" {
			return s.get(c, ri)
		}
		return s.list(c, ri, opts, sel)
	case http.MethodPost:
		if ri.name != "" {
			return apiMethodNotAllowed(req.Method, p)
		}
		return s.create(c, ri)
	case http.MethodPut:
		if ri.name == "" {
			return apiMethodNotAllowed(req.Method, p)
		}
		return s.update(c, ri)
	case http.MethodPatch:
		if ri.name == "" {
			return apiMethodNotAllowed(req.Method, p)
		}
		return s.patch(c, ri)
	case http.MethodDelete:
		if ri.name == "" {
			return s.deleteCollection(c, ri)
		}
		return s.delete(c, ri)
	}
	return apiMethodNotAllowed(req.Method, p)
}

// checkPathNames answers 404 for a name or namespace in the path that no
// object can have (longer than a name may be, or not a valid path
// segment: ".", "..", or containing "/" or "%"), as the Kubernetes
// apiserver answers for a name it has not stored, before anything is
// sent to NATS. Names that merely break the kind's naming rules still
// reach the handlers, which answer 404 or 422 as Kubernetes does.
func checkPathNames(ri reqInfo) error {
	if ri.namespace != "" && !possibleName(ri.namespace, validation.DNS1123LabelMaxLength) {
		return apierrors.NewNotFound(store.Namespaces.GroupResource(), ri.namespace)
	}
	if ri.name != "" && !possibleName(ri.name, validation.DNS1123SubdomainMaxLength) {
		return apierrors.NewNotFound(ri.res.GroupResource(), ri.name)
	}
	return nil
}

func possibleName(name string, maxLen int) bool {
	return len(name) <= maxLen && len(path.IsValidPathSegmentName(name)) == 0
}

// waitForPolicy waits, at most 10 s, until the authorizer lets
// system:anonymous GET /healthz, that is, until the default policy
// Bootstrap wrote (system:public-info-viewer) reached the authorizer's
// informers, so that health checks and the first requests of users bound
// by default roles are not refused for the few milliseconds after a start
// (kube-apiserver's readyz waits on its rbac/bootstrap-roles hook alike).
// A cluster whose admin removed that binding is served after the 10 s
// with a warning.
func (s *Server) waitForPolicy(ctx context.Context) {
	attrs := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}},
		Verb: "get", Path: "/healthz"}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if d, _, err := s.cfg.Authorizer.Authorize(ctx, attrs); err == nil && d == authorizer.DecisionAllow {
			return
		}
		if time.Now().After(deadline) {
			s.log.Warn("apiserver: serving although system:anonymous may not GET /healthz (was the system:public-info-viewer binding removed?)")
			return
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// listStorageClasses lists the StorageClasses for the DefaultStorageClass
// admission plugin (from the bucket's watch cache).
func (s *Server) listStorageClasses(ctx context.Context) ([]*storagev1.StorageClass, error) {
	objs, _, err := s.st.List(ctx, storage.StorageClasses, "")
	if err != nil {
		return nil, err
	}
	out := make([]*storagev1.StorageClass, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*storagev1.StorageClass))
	}
	return out, nil
}
