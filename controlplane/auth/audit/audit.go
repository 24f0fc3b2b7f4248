// Package audit writes the apiserver's audit log: one audit.k8s.io/v1 Event
// per request stage as a JSON line, exactly the kube-apiserver's log
// backend (k8s.io/apiserver/plugin/pkg/audit/log), with the level of each
// request chosen by a Kubernetes audit Policy (k8s.io/apiserver/pkg/audit/policy).
//
// It ports the kube-apiserver's WithAuditInit and WithAudit filters
// (k8s.io/apiserver/pkg/endpoints/filters/audit*.go) in a shape any HTTP
// stack can call: Auditor.Start when a request is authenticated,
// Request.ResponseWriter around the writer, Request.Finish when the
// handler returns. The event lives in the request context as the
// library's audit.AuditContext, so code further down the chain may add
// annotations (audit.AddAuditAnnotation) or the impersonated user
// (audit.LogImpersonatedUser) as Kubernetes' filters do.
//
// Differences from the kube-apiserver, on purpose:
//   - the annotation apiserver.latency.k8s.io/total is written on every
//     ResponseComplete event (Kubernetes writes it only past 500 ms);
//   - at Request and RequestResponse levels the request and response
//     bodies are logged as received and sent (JSON, YAML turned into
//     JSON; protobuf bodies are left out) rather than re-encoded, and
//     only up to Options.MaxBodyBytes each;
//   - a client's Audit-ID header is kept only when it is at most 64
//     letters, digits, '-' or '_'; any other value is replaced by a new
//     UUID so a client cannot write arbitrary text into the log's IDs;
//   - the log mode (Options.Mode, --audit-log-mode) is "blocking" (each
//     event is written before the request goes on) or "batch" (events
//     are queued, in order, and written by one goroutine; a full queue
//     makes the request wait instead of dropping the event); the format
//     is always "json".
package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"gopkg.in/natefinch/lumberjack.v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	auditlog "k8s.io/apiserver/plugin/pkg/audit/log"
	"sigs.k8s.io/yaml"
)

// LatencyAnnotation is the annotation of a ResponseComplete event that
// holds the request's total latency (Go duration syntax, "1.503ms"), the
// kube-apiserver's name.
const LatencyAnnotation = "apiserver.latency.k8s.io/total"

// DefaultMaxBodyBytes bounds each request and response body logged at the
// Request and RequestResponse levels: 3 MiB, the apiserver's body limit.
const DefaultMaxBodyBytes = 3 << 20

// Options configures an Auditor; the names follow the kube-apiserver's
// --audit-log-* and --audit-policy-file flags.
type Options struct {
	// LogPath is the file events are appended to (created 0600, its
	// directory 0755), or "-" for standard output (--audit-log-path).
	LogPath string
	// MaxSizeMB is the size in megabytes at which the file is rotated
	// (--audit-log-maxsize); 0 means lumberjack's 100 MB.
	MaxSizeMB int
	// MaxBackups is how many rotated files are kept
	// (--audit-log-maxbackup); 0 keeps all of them.
	MaxBackups int
	// MaxAgeDays is how many days a rotated file is kept
	// (--audit-log-maxage); 0 keeps them regardless of age.
	MaxAgeDays int
	// PolicyFile is a Kubernetes audit Policy (audit.k8s.io/v1, YAML or
	// JSON; --audit-policy-file). Empty: DefaultPolicy.
	PolicyFile string
	// Policy is used when PolicyFile is empty; nil means DefaultPolicy.
	Policy *auditinternal.Policy
	// Out, when set, receives the JSON lines instead of LogPath (tests).
	Out io.Writer
	// MaxBodyBytes bounds each body logged at the Request and
	// RequestResponse levels; a larger one is left out of the event.
	// Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Mode is ModeBlocking (the default, "") or ModeBatch
	// (--audit-log-mode).
	Mode string
	// BatchBufferSize is how many events ModeBatch queues at most
	// (--audit-log-batch-buffer-size); default DefaultBatchBufferSize.
	BatchBufferSize int
}

// DefaultPolicy is the policy used without --audit-policy-file: health
// and version checks (/healthz, /livez, /readyz and their sub-paths,
// /version) are not logged; every other request is logged at the Metadata
// level (user, verb, objectRef, responseStatus, timestamps, annotations;
// never a body, so no Secret data), without the RequestReceived stage: one
// line per request, and for a watch or another long-running request a
// ResponseStarted line when it starts and a ResponseComplete line when it
// ends (the events sent on a watch, bookmarks included, are not logged).
func DefaultPolicy() *auditinternal.Policy {
	return &auditinternal.Policy{
		OmitStages: []auditinternal.Stage{auditinternal.StageRequestReceived},
		Rules: []auditinternal.PolicyRule{
			{Level: auditinternal.LevelNone, NonResourceURLs: []string{"/healthz", "/healthz/*", "/livez", "/livez/*", "/readyz", "/readyz/*", "/version", "/version/"}},
			{Level: auditinternal.LevelMetadata},
		},
	}
}

// LoadPolicy reads a Kubernetes audit Policy file (audit.k8s.io/v1) and
// validates it as the kube-apiserver does; the error names the file.
func LoadPolicy(path string) (*auditinternal.Policy, error) {
	p, err := policy.LoadPolicyFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("--audit-policy-file: %w", err)
	}
	return p, nil
}

// Auditor evaluates the policy for each request and writes its events.
// A nil *Auditor audits nothing. Create it with New.
type Auditor struct {
	policy  audit.PolicyRuleEvaluator
	backend audit.Backend
	batch   *batchBackend // ModeBatch's backend (also backend); nil in ModeBlocking
	closer  io.Closer
	maxBody int64
}

// New opens the log and loads the policy. It fails on an unreadable or
// invalid policy, or a log file that cannot be opened for writing.
func New(o Options) (*Auditor, error) {
	p := o.Policy
	if o.PolicyFile != "" {
		var err error
		if p, err = LoadPolicy(o.PolicyFile); err != nil {
			return nil, err
		}
	}
	if p == nil {
		p = DefaultPolicy()
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	switch o.Mode {
	case "", ModeBlocking, ModeBatch:
	default:
		return nil, fmt.Errorf("--audit-log-mode %q: must be %s or %s", o.Mode, ModeBlocking, ModeBatch)
	}
	if o.BatchBufferSize < 0 {
		return nil, errors.New("--audit-log-batch-buffer-size must not be negative")
	}
	a := &Auditor{policy: policy.NewPolicyRuleEvaluator(p), maxBody: o.MaxBodyBytes}
	out := o.Out
	switch {
	case out != nil:
	case o.LogPath == "":
		return nil, errors.New("audit: Options.LogPath or Options.Out is required")
	case o.LogPath == "-":
		out = os.Stdout
	default:
		if o.MaxSizeMB < 0 || o.MaxBackups < 0 || o.MaxAgeDays < 0 {
			return nil, errors.New("--audit-log-maxsize, --audit-log-maxbackup and --audit-log-maxage must not be negative")
		}
		lj := &lumberjack.Logger{Filename: o.LogPath, MaxSize: o.MaxSizeMB, MaxBackups: o.MaxBackups, MaxAge: o.MaxAgeDays}
		// Open now so a bad path fails at start, not at the first request.
		if _, err := lj.Write(nil); err != nil {
			return nil, fmt.Errorf("--audit-log-path %s: %w", o.LogPath, err)
		}
		out, a.closer = lj, lj
	}
	newLog := func(w io.Writer) audit.Backend {
		return auditlog.NewBackend(&lineWriter{w: w}, auditlog.FormatJson, auditv1.SchemeGroupVersion)
	}
	if o.Mode == ModeBatch {
		a.batch = newBatchBackend(out, o.BatchBufferSize, newLog)
		a.backend = a.batch
	} else {
		a.backend = newLog(out)
	}
	return a, nil
}

// Close writes the events ModeBatch has queued (later events are not
// stored: their request fails as without a log) and closes the log file
// (not standard output or Options.Out).
func (a *Auditor) Close() error {
	if a == nil {
		return nil
	}
	if a.batch != nil {
		a.batch.close()
	}
	if a.closer == nil {
		return nil
	}
	return a.closer.Close()
}

// lineWriter serializes writes so two events never interleave in one
// line (lumberjack locks too; Options.Out and stdout may not).
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Request is the audit state of one request; a nil *Request (auditing
// off, or level None) does nothing.
type Request struct {
	a           *Auditor
	ctx         context.Context
	ac          *audit.AuditContext
	level       auditinternal.Level
	longRunning bool
	reqBody     *capture // nil below the Request level
	respBody    *capture // nil below the RequestResponse level
	reqType     string
	done        bool

	mu  sync.Mutex                     // guards obj
	obj *auditinternal.ObjectReference // from LogObject; nil until called
}

// requestKey is the context key of the *Request (LogObject).
type requestKey struct{}

// LogObject records the object a request creates (its name, namespace,
// uid and resourceVersion) in the event's objectRef where the request's
// path did not name them, as the kube-apiserver's LogRequestObject does
// at every level from Metadata: call it with the decoded request object,
// and again with the stored one (which has its generated name and uid).
// It does nothing when ctx is not audited.
func LogObject(ctx context.Context, obj metav1.Object) {
	r, _ := ctx.Value(requestKey{}).(*Request)
	if r == nil || obj == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.obj == nil {
		r.obj = &auditinternal.ObjectReference{}
	}
	if obj.GetName() != "" {
		r.obj.Name = obj.GetName()
	}
	if obj.GetNamespace() != "" {
		r.obj.Namespace = obj.GetNamespace()
	}
	if obj.GetUID() != "" {
		r.obj.UID = obj.GetUID()
	}
	if obj.GetResourceVersion() != "" {
		r.obj.ResourceVersion = obj.GetResourceVersion()
	}
}

// ProcessEvents is the Request's sink: it fills the objectRef of a copy
// of each event from LogObject, then writes it.
func (r *Request) ProcessEvents(events ...*auditinternal.Event) bool {
	r.mu.Lock()
	obj := r.obj
	if obj != nil {
		obj = obj.DeepCopy()
	}
	r.mu.Unlock()
	if obj == nil {
		return r.a.backend.ProcessEvents(events...)
	}
	ok := true
	for _, ev := range events {
		ev = ev.DeepCopy()
		if ev.ObjectRef == nil {
			ev.ObjectRef = &auditinternal.ObjectReference{}
		}
		ref := ev.ObjectRef
		for _, f := range []struct {
			dst *string
			src string
		}{{&ref.Name, obj.Name}, {&ref.Namespace, obj.Namespace}, {&ref.ResourceVersion, obj.ResourceVersion}} {
			if *f.dst == "" {
				*f.dst = f.src
			}
		}
		if ref.UID == "" {
			ref.UID = obj.UID
		}
		if r.a.batch != nil {
			ok = r.a.batch.enqueue([]*auditinternal.Event{ev}, true) && ok // ev is this call's copy
			continue
		}
		ok = r.a.backend.ProcessEvents(ev) && ok
	}
	return ok
}

// Start begins auditing req as attrs describe it (the authenticated user
// and Kubernetes' request attributes: verb, resource, namespace, name,
// or the non-resource path), received at the given time. longRunning
// requests (watches, logs, exec) also get a ResponseStarted event when
// their response starts. It returns req with the audit context in its
// context (pass it down the chain) and the Request to finish; the
// response header Audit-Id is set. When the policy's level for req is
// None the Request is nil. An error means the RequestReceived event could
// not be written: answer 500, as the kube-apiserver does.
func (a *Auditor) Start(req *http.Request, w http.ResponseWriter, attrs authorizer.Attributes, received time.Time, longRunning bool) (*http.Request, *Request, error) {
	if a == nil {
		return req, nil, nil
	}
	ctx := audit.WithAuditContext(req.Context())
	id := req.Header.Get(auditinternal.HeaderAuditID)
	if !validAuditID(id) {
		id = uuid.New().String()
	}
	audit.WithAuditID(ctx, types.UID(id))
	if w.Header().Get(auditinternal.HeaderAuditID) == "" {
		w.Header().Set(auditinternal.HeaderAuditID, id)
	}
	ac := audit.AuditContextFrom(ctx)
	rac := a.policy.EvaluatePolicyRule(attrs)
	if rac.Level == auditinternal.LevelNone {
		if err := ac.Init(rac, a.backend); err != nil {
			return req.WithContext(ctx), nil, fmt.Errorf("audit: %w", err)
		}
		return req.WithContext(ctx), nil, nil
	}
	r := &Request{a: a, ac: ac, level: rac.Level, longRunning: longRunning}
	ctx = context.WithValue(ctx, requestKey{}, r)
	r.ctx = ctx
	if err := ac.Init(rac, r); err != nil {
		return req.WithContext(ctx), nil, fmt.Errorf("audit: %w", err)
	}
	req = req.WithContext(ctx)
	audit.LogRequestMetadata(ctx, req, received, attrs)
	if !rac.Level.Less(auditinternal.LevelRequest) && req.Body != nil && req.Body != http.NoBody {
		r.reqBody = &capture{max: a.maxBody}
		r.reqType = req.Header.Get("Content-Type")
		req.Body = &teeBody{ReadCloser: req.Body, c: r.reqBody}
	}
	if !rac.Level.Less(auditinternal.LevelRequestResponse) && !longRunning {
		r.respBody = &capture{max: a.maxBody}
	}
	if !ac.ProcessEventStage(ctx, auditinternal.StageRequestReceived) {
		return req, nil, errors.New("failed to store audit event")
	}
	return req, r, nil
}

// validAuditID reports whether a client's Audit-ID header may be kept.
func validAuditID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ResponseWriter wraps w so the response's status code is recorded (and,
// for a long-running request, the ResponseStarted event written when the
// header goes out). It keeps http.Flusher and http.Hijacker working; a
// hijacked connection is recorded as 101 Switching Protocols.
func (r *Request) ResponseWriter(w http.ResponseWriter) http.ResponseWriter {
	if r == nil {
		return w
	}
	return &responseWriter{ResponseWriter: w, r: r}
}

// SetResponseStatus records the Status a failed request answered (its
// code, reason and message appear in responseStatus, as the
// kube-apiserver logs them).
func (r *Request) SetResponseStatus(st *metav1.Status) {
	if r == nil || st == nil {
		return
	}
	r.ac.LogResponseObject(&metav1.Status{Status: st.Status, Message: st.Message, Reason: st.Reason, Details: st.Details, Code: st.Code}, nil)
}

// Finish writes the ResponseComplete event (or, with panicked, the Panic
// event with code 500). ctx is the request's context as the handler left
// it: when its user differs from the authenticated one (impersonation)
// and nothing logged the impersonated user yet, it is recorded in
// impersonatedUser as Kubernetes does. Finish is idempotent.
func (r *Request) Finish(ctx context.Context, panicked any) {
	if r == nil || r.done {
		return
	}
	r.done = true
	if u, ok := genericrequest.UserFrom(ctx); ok && r.ac.GetEventImpersonatedUser() == nil {
		if orig := r.ac.GetEventUser(); !sameUser(orig.Username, orig.Groups, u) {
			r.ac.LogImpersonatedUser(u, "")
		}
	}
	if panicked != nil {
		r.ac.SetEventResponseStatus(&metav1.Status{Code: http.StatusInternalServerError, Status: metav1.StatusFailure,
			Reason: metav1.StatusReasonInternalError, Message: fmt.Sprintf("APIServer panic'd: %v", panicked)})
		r.ac.ProcessEventStage(r.ctx, auditinternal.StagePanic)
		return
	}
	if r.ac.GetEventResponseStatus() == nil {
		// Neither a header nor a body was written (Kubernetes' wording).
		r.ac.SetEventResponseStatus(&metav1.Status{Code: http.StatusOK, Status: metav1.StatusSuccess, Message: "Connection closed early"})
		if r.longRunning {
			r.ac.ProcessEventStage(r.ctx, auditinternal.StageResponseStarted)
		}
	}
	if r.reqBody != nil {
		if raw := r.reqBody.json(r.reqType); raw != nil {
			r.ac.LogRequestPatch(raw) // a JSON request object, as Kubernetes logs a patch
		}
	}
	if r.respBody != nil {
		if raw := r.respBody.json(r.respBody.contentType); raw != nil {
			r.ac.LogResponseObject(nil, &runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON})
		}
	}
	latency := time.Since(r.ac.GetEventRequestReceivedTimestamp().Time)
	audit.AddAuditAnnotation(r.ctx, LatencyAnnotation, latency.String())
	r.ac.ProcessEventStage(r.ctx, auditinternal.StageResponseComplete)
}

func sameUser(name string, groups []string, u user.Info) bool {
	if name != u.GetName() || len(groups) != len(u.GetGroups()) {
		return false
	}
	for i, g := range u.GetGroups() {
		if groups[i] != g {
			return false
		}
	}
	return true
}

type responseWriter struct {
	http.ResponseWriter
	r    *Request
	once sync.Once
}

func (w *responseWriter) code(code int) {
	w.once.Do(func() {
		w.r.ac.SetEventResponseStatusCode(int32(code))
		if w.r.respBody != nil {
			w.r.respBody.contentType = w.Header().Get("Content-Type")
		}
		if w.r.longRunning {
			w.r.ac.ProcessEventStage(w.r.ctx, auditinternal.StageResponseStarted)
		}
	})
}

func (w *responseWriter) WriteHeader(code int) {
	w.code(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	w.code(http.StatusOK)
	if w.r.respBody != nil {
		w.r.respBody.add(b)
	}
	return w.ResponseWriter.Write(b)
}

func (w *responseWriter) Flush() {
	w.code(http.StatusOK)
	_ = http.NewResponseController(w.ResponseWriter).Flush() // a writer that cannot flush needs none
}

func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.code(http.StatusSwitchingProtocols)
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// capture keeps the first max bytes of a body; past max it gives up.
type capture struct {
	max         int64
	buf         []byte
	over        bool
	contentType string
	mu          sync.Mutex
}

func (c *capture) add(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return
	}
	if int64(len(c.buf)+len(b)) > c.max {
		c.over, c.buf = true, nil
		return
	}
	c.buf = append(c.buf, b...)
}

// json returns the body as JSON, or nil when it is empty, too large,
// or neither JSON nor YAML (protobuf).
func (c *capture) json(contentType string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over || len(c.buf) == 0 {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == "application/vnd.kubernetes.protobuf" || mt == "application/octet-stream" {
		return nil
	}
	if json.Valid(c.buf) {
		return c.buf
	}
	if j, err := yaml.YAMLToJSON(c.buf); err == nil && json.Valid(j) {
		return j
	}
	return nil
}

type teeBody struct {
	io.ReadCloser
	c *capture
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if n > 0 {
		t.c.add(p[:n])
	}
	return n, err
}

// requestInfoFactory parses paths as the kube-apiserver does.
var requestInfoFactory = &genericrequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// RequestAttributes returns the authorization attributes of req made by
// u, as the kube-apiserver's GetAuthorizerAttributes builds them from its
// RequestInfo: the RequestInfo in req's context when there is one, else
// one parsed here with Kubernetes' RequestInfoFactory (verb get, list,
// watch, create, update, patch, delete, deletecollection; resource,
// subresource, namespace, name; or a non-resource path).
func RequestAttributes(req *http.Request, u user.Info) authorizer.Attributes {
	ri, ok := genericrequest.RequestInfoFrom(req.Context())
	if !ok {
		var err error
		if ri, err = requestInfoFactory.NewRequestInfo(req); err != nil {
			ri = &genericrequest.RequestInfo{Path: req.URL.Path, Verb: strings.ToLower(req.Method)}
		}
	}
	return authorizer.AttributesRecord{User: u, Verb: ri.Verb, Namespace: ri.Namespace, APIGroup: ri.APIGroup, APIVersion: ri.APIVersion,
		Resource: ri.Resource, Subresource: ri.Subresource, Name: ri.Name, ResourceRequest: ri.IsResourceRequest, Path: ri.Path}
}
