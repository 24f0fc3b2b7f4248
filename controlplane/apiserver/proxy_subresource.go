package apiserver

// # The pods/proxy and services/proxy subresources
//
// As kube-apiserver's ProxyREST of pods and services
// (pkg/registry/core/pod/rest/subresources.go, pkg/registry/core/service/
// storage/storage.go ResourceLocation), on apimachinery's
// UpgradeAwareHandler (the same proxy code, with its link rewriting,
// X-Forwarded-* headers, hop-by-hop header removal and upgrades):
//
//	/api/v1/namespaces/{ns}/pods/{[scheme:]name[:port]}/proxy[/{path}]
//	/api/v1/namespaces/{ns}/services/{[scheme:]name[:port]}/proxy[/{path}]
//
// Every method; the query string is kept, bodies are streamed both ways.
// The authorizer sees the subresource "proxy" with the method's verb
// (get, create, update, patch, delete): RBAC rules on pods/proxy and
// services/proxy.
//
// Pods: the port is a number, a containerPort name, or, omitted, the
// pod's first containerPort (80 when it declares none). Services: the
// port is the Service port's number or name (omitted: its unnamed port);
// the target is an endpoint of the Service's EndpointSlices (label
// kubernetes.io/service-name) that is ready and not terminating, with the
// slice's port of that name, picked at random as kube-apiserver does; 503
// ServiceUnavailable "no endpoints available for service \"x\"" when
// there is none, "no service port N found for service \"x\"" for a port
// the Service lacks. Missing pods and services are 404, malformed names
// 400.
//
// Reaching the pod: the apiserver dials podIP:port itself when the pod
// has an address of its own (status.podIP set and not the node's
// status.hostIP, not hostNetwork) and that address answers within
// proxyDirectDialTimeout; otherwise the connection goes through the pod's
// node agent as one port-forward stream of the node API (nodeapi
// StreamPortForward: the agent dials the port in the pod, a container's
// network namespace or a WASM module's listener, exactly as kubectl
// port-forward does, with the same rules: only the control plane may open
// streams, replies only to node inboxes). So pods on remote nodes that the
// control plane has no route to are reached as well, with no operation
// added to the node API. A node whose pod addresses did not answer a
// direct dial (timeout, no route) is reached through its agent for
// proxyDirectRetryAfter before a direct dial is tried again.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/utils/ptr"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
)

const (
	// proxyDirectDialTimeout bounds a direct dial of a pod's address
	// before the node agent is asked instead.
	proxyDirectDialTimeout = time.Second
	// proxyDirectRetryAfter is how long a node whose pod addresses could
	// not be dialled directly is reached only through its agent.
	proxyDirectRetryAfter = 30 * time.Second
)

// proxyPath is what a proxy subresource path names.
type proxyPath struct {
	namespace string
	resource  string // "pods" or "services"
	id        string // [scheme:]name[:port], unescaped
	rest      string // the path after .../proxy, unescaped ("" or "/...")
	rawRest   string // rest as it was escaped
}

// parseProxyPath recognises /api/v1/namespaces/{ns}/{pods|services}/{id}/proxy[/...]
// in an escaped path.
func parseProxyPath(escaped string) (proxyPath, bool) {
	const prefix = "/api/v1/namespaces/"
	if !strings.HasPrefix(escaped, prefix) {
		return proxyPath{}, false
	}
	segs := strings.SplitN(escaped[len(prefix):], "/", 5)
	if len(segs) < 4 || segs[3] != "proxy" || (segs[1] != "pods" && segs[1] != "services") {
		return proxyPath{}, false
	}
	var p proxyPath
	var err error
	if p.namespace, err = url.PathUnescape(segs[0]); err != nil {
		return proxyPath{}, false
	}
	if p.id, err = url.PathUnescape(segs[2]); err != nil {
		return proxyPath{}, false
	}
	p.resource = segs[1]
	if len(segs) == 5 {
		p.rawRest = "/" + segs[4]
		if p.rest, err = url.PathUnescape(p.rawRest); err != nil {
			return proxyPath{}, false
		}
	}
	return p, true
}

// isProxyRequest reports whether req is to a proxy subresource (a
// long-running request, as Kubernetes' BasicLongRunningRequestCheck).
func isProxyRequest(req *http.Request) bool {
	_, ok := parseProxyPath(req.URL.EscapedPath())
	return ok
}

// serveProxy answers a pods/proxy or services/proxy request (see the
// comment at the top of this file).
func (s *Server) serveProxy(c echo.Context, pp proxyPath) error {
	ctx := c.Request().Context()
	if !possibleName(pp.namespace, 63) {
		return apierrors.NewNotFound(store.Namespaces.GroupResource(), pp.namespace)
	}
	var (
		scheme string
		tgt    proxyTarget
		err    error
	)
	if pp.resource == "pods" {
		scheme, tgt, err = s.podProxyTarget(ctx, pp)
	} else {
		scheme, tgt, err = s.serviceProxyTarget(ctx, pp)
	}
	if err != nil {
		return err
	}
	if tgt.direct {
		if err := proxyableIP(tgt.host); err != nil {
			return apierrors.NewBadRequest(err.Error())
		}
	}
	if scheme == "" {
		scheme = "http"
	}
	loc := &url.URL{Scheme: scheme, Host: net.JoinHostPort(tgt.host, strconv.Itoa(int(tgt.port))), Path: pp.rest}
	if pp.rawRest != pp.rest {
		loc.RawPath = pp.rawRest
	}
	tr := &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return s.dialProxyTarget(ctx, tgt) },
		DisableKeepAlives: true, // one target per request
		// As kube-apiserver's proxy transport to pods: their serving
		// certificates are not verified.
		TLSClientConfig:       &tls.Config{InsecureSkipVerify: true},
		ResponseHeaderTimeout: 0,
	}
	defer tr.CloseIdleConnections()
	h := proxy.NewUpgradeAwareHandler(loc, tr, true, false, proxyResponder{c})
	s.log.Debug("proxy", "resource", pp.resource, "namespace", pp.namespace, "id", pp.id, "target", loc.Host, "node", tgt.node)
	h.ServeHTTP(c.Response(), c.Request())
	return nil
}

// proxyResponder writes the proxy's errors as Statuses (the transport's
// dial errors are already 503 "error trying to reach service: ...").
type proxyResponder struct{ c echo.Context }

func (r proxyResponder) Error(_ http.ResponseWriter, _ *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		return // the client left
	}
	writeError(r.c, err)
}

// proxyTarget is where a proxied request goes.
type proxyTarget struct {
	host string // the address dialled directly; for the Host of the URL
	port int32  // the port at host
	// pod, when known, is reached through its node's agent if host
	// cannot be dialled; agentPort is the pod's port for the agent.
	pod       *corev1.Pod
	agentPort int32
	node      string
	direct    bool // host is the pod's own address (or an address outside any pod)
}

// podProxyTarget resolves pods/{[scheme:]name[:port]}.
func (s *Server) podProxyTarget(ctx context.Context, pp proxyPath) (string, proxyTarget, error) {
	scheme, name, portStr, ok := utilnet.SplitSchemeNamePort(pp.id)
	if !ok || (scheme != "" && scheme != "http" && scheme != "https") {
		return "", proxyTarget{}, apierrors.NewBadRequest(fmt.Sprintf("invalid pod request %q", pp.id))
	}
	if !possibleName(name, 253) {
		return "", proxyTarget{}, apierrors.NewNotFound(store.Pods.GroupResource(), name)
	}
	obj, err := s.st.Get(ctx, store.Pods, pp.namespace, name)
	if err != nil {
		return "", proxyTarget{}, err
	}
	pod := obj.(*corev1.Pod)
	var port int32
	switch {
	case portStr == "":
		port = 80
		if scheme == "https" {
			port = 443
		}
	firstPort:
		for _, c := range pod.Spec.Containers {
			for _, cp := range c.Ports {
				port = cp.ContainerPort
				break firstPort
			}
		}
	default:
		if n, err := strconv.ParseUint(portStr, 10, 16); err == nil && n > 0 {
			port = int32(n)
			break
		}
		for _, c := range pod.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == portStr {
					port = cp.ContainerPort
				}
			}
		}
		if port == 0 {
			return "", proxyTarget{}, apierrors.NewBadRequest(fmt.Sprintf("pod %s has no container port named %q", name, portStr))
		}
	}
	tgt, err := podTarget(pod, pod.Status.PodIP, port, port)
	return scheme, tgt, err
}

// podTarget is the target port of pod at ip (its status.podIP or an
// endpoint address), reached at agentPort through its agent.
func podTarget(pod *corev1.Pod, ip string, port, agentPort int32) (proxyTarget, error) {
	if p := pod.Status.Phase; p == corev1.PodSucceeded || p == corev1.PodFailed {
		return proxyTarget{}, apierrors.NewServiceUnavailable(fmt.Sprintf("pod %s/%s is %s", pod.Namespace, pod.Name, p))
	}
	if pod.Spec.NodeName == "" {
		return proxyTarget{}, apierrors.NewServiceUnavailable(fmt.Sprintf("pod %s/%s does not have a host assigned", pod.Namespace, pod.Name))
	}
	t := proxyTarget{host: ip, port: port, pod: pod, agentPort: agentPort, node: pod.Spec.NodeName}
	// The node's address is not the pod's (a host-network pod, or a WASM
	// pod on a host port): only its agent knows where the port is.
	t.direct = ip != "" && ip != pod.Status.HostIP && !pod.Spec.HostNetwork
	if t.host == "" {
		t.host = pod.Status.HostIP
	}
	if t.host == "" {
		t.host = "0.0.0.0" // only the URL's Host: the agent dials
	}
	return t, nil
}

// serviceProxyTarget resolves services/{[scheme:]name[:port]} to a ready
// endpoint, as kube-apiserver's service ResourceLocation.
func (s *Server) serviceProxyTarget(ctx context.Context, pp proxyPath) (string, proxyTarget, error) {
	scheme, name, portStr, ok := utilnet.SplitSchemeNamePort(pp.id)
	if !ok || (scheme != "" && scheme != "http" && scheme != "https") {
		return "", proxyTarget{}, apierrors.NewBadRequest(fmt.Sprintf("invalid service request %q", pp.id))
	}
	if !possibleName(name, 63) {
		return "", proxyTarget{}, apierrors.NewNotFound(store.Services.GroupResource(), name)
	}
	obj, err := s.st.Get(ctx, store.Services, pp.namespace, name)
	if err != nil {
		return "", proxyTarget{}, err
	}
	svc := obj.(*corev1.Service)
	var svcPort *corev1.ServicePort
	if n, err := strconv.ParseInt(portStr, 10, 64); err == nil {
		for i := range svc.Spec.Ports {
			if int64(svc.Spec.Ports[i].Port) == n {
				svcPort = &svc.Spec.Ports[i]
				break
			}
		}
		if svcPort == nil {
			return "", proxyTarget{}, apierrors.NewServiceUnavailable(fmt.Sprintf("no service port %d found for service %q", n, name))
		}
		portStr = svcPort.Name
	} else {
		for i := range svc.Spec.Ports {
			if svc.Spec.Ports[i].Name == portStr {
				svcPort = &svc.Spec.Ports[i]
			}
		}
	}
	noEndpoints := apierrors.NewServiceUnavailable(fmt.Sprintf("no endpoints available for service %q", name))
	page, err := s.st.ListPage(ctx, store.EndpointSlices, pp.namespace, store.ListPageOptions{
		Labels: labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name}), // the index
		Match:  func(o store.Object) bool { return o.GetLabels()[discoveryv1.LabelServiceName] == name }})
	if err != nil {
		return "", proxyTarget{}, err
	}
	cands := readyEndpoints(page.Items, portStr)
	if len(cands) == 0 {
		return "", proxyTarget{}, noEndpoints
	}
	seed := rand.IntN(len(cands))
	for i := range cands {
		c := cands[(seed+i)%len(cands)]
		if t, ok := s.endpointTarget(ctx, pp.namespace, c.ip, c.targetRef, c.port, svcPort); ok {
			return scheme, t, nil
		}
	}
	return "", proxyTarget{}, noEndpoints
}

// sliceEndpoint is one address of an EndpointSlice that may serve a
// services/proxy request, with the slice's port of the request's name.
type sliceEndpoint struct {
	ip        string
	port      int32
	targetRef *corev1.ObjectReference
}

// readyEndpoints returns the endpoints of a Service's EndpointSlices
// (objs, *discoveryv1.EndpointSlice) that a services/proxy request of
// Service port portName ("" for the unnamed port) may go to: IPv4 or
// IPv6 slices with a port of that name, endpoints ready (a nil ready
// counts as ready, as the EndpointSlice API says consumers must read it)
// and not terminating, first address of each. An IP listed by several
// slices (a slice being replaced) comes once.
func readyEndpoints(objs []store.Object, portName string) []sliceEndpoint {
	var out []sliceEndpoint
	seen := map[string]bool{}
	for _, o := range objs {
		sl, ok := o.(*discoveryv1.EndpointSlice)
		if !ok || (sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6) {
			continue
		}
		port := int32(0)
		for _, p := range sl.Ports {
			if p.Port != nil && *p.Port > 0 && ptr.Deref(p.Name, "") == portName {
				port = *p.Port
				break
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range sl.Endpoints {
			if len(ep.Addresses) == 0 || !ptr.Deref(ep.Conditions.Ready, true) || ptr.Deref(ep.Conditions.Terminating, false) {
				continue
			}
			k := net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(port)))
			if seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, sliceEndpoint{ip: ep.Addresses[0], port: port, targetRef: ep.TargetRef})
		}
	}
	return out
}

// endpointTarget is one endpoint address ip: a pod's (targetRef), reached
// directly or through its agent, or another address, dialled directly.
// An address whose pod is gone or no longer has that IP is skipped (as
// kube-apiserver's isValidAddress).
func (s *Server) endpointTarget(ctx context.Context, ns, ip string, ref *corev1.ObjectReference, port int32, svcPort *corev1.ServicePort) (proxyTarget, bool) {
	if ref == nil || ref.Kind != "Pod" {
		return proxyTarget{host: ip, port: port, direct: true}, ip != ""
	}
	pns := ref.Namespace
	if pns == "" {
		pns = ns
	}
	obj, err := s.st.Get(ctx, store.Pods, pns, ref.Name)
	if err != nil {
		return proxyTarget{}, false
	}
	pod := obj.(*corev1.Pod)
	known := pod.Status.PodIP == ip || pod.Status.HostIP == ip
	for _, pip := range pod.Status.PodIPs {
		known = known || pip.IP == ip
	}
	if !known {
		return proxyTarget{}, false
	}
	// The agent dials a port of the pod: the endpoint's port when the pod
	// declares it, else the Service's targetPort resolved on the pod
	// (an endpoint may publish a host port).
	agentPort := port
	if !declaresPort(pod, port) && svcPort != nil {
		if p, ok := resolveTargetPort(pod, svcPort); ok {
			agentPort = p
		}
	}
	t, err := podTarget(pod, ip, port, agentPort)
	return t, err == nil
}

func declaresPort(pod *corev1.Pod, port int32) bool {
	for _, c := range pod.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.ContainerPort == port {
				return true
			}
		}
	}
	return false
}

// resolveTargetPort is a Service port's targetPort on pod: its number, or
// the containerPort of that name (as the endpoints controller's
// podutil.FindPort); an unset targetPort is the port itself.
func resolveTargetPort(pod *corev1.Pod, sp *corev1.ServicePort) (int32, bool) {
	tp := sp.TargetPort
	if tp.IntValue() == 0 && tp.StrVal == "" {
		return sp.Port, true
	}
	if tp.StrVal == "" {
		return tp.IntVal, true
	}
	for _, c := range pod.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == tp.StrVal && (cp.Protocol == sp.Protocol || cp.Protocol == "" || sp.Protocol == "") {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

// directUnreachable holds, per node name, until when the node's pod
// addresses are reached through its agent only (a direct dial failed
// other than by a refusal).
var directUnreachable sync.Map // string -> time.Time

// errAddressNotAllowed is the error of a proxy target the apiserver may
// not dial, as Kubernetes' proxyutil.ErrAddressNotAllowed.
var errAddressNotAllowed = errors.New("address not allowed")

// proxyableIP refuses the addresses the apiserver never dials for a
// proxy subresource, as Kubernetes' proxyutil.IsProxyableIP: not an IP,
// unspecified (0.0.0.0, ::), link-local unicast (169.254.0.0/16 with the
// cloud metadata address, fe80::/10) and link-local multicast. Unlike
// there loopback is dialled: pods of a node on loopback (orca-agent's
// default --node-ip 127.0.0.1, `make run`) have loopback addresses of
// their own.
func proxyableIP(host string) error {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: %q is not an IP address", errAddressNotAllowed, host)
	}
	a = a.Unmap()
	if a.IsUnspecified() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() {
		return errAddressNotAllowed
	}
	return nil
}

// dialProxyTarget opens the connection of a proxied request: a direct
// dial when the target allows it, else (or when it fails) a port-forward
// stream through the pod's node agent.
func (s *Server) dialProxyTarget(ctx context.Context, t proxyTarget) (net.Conn, error) {
	if t.direct {
		skip := false
		if until, ok := directUnreachable.Load(t.node); ok && t.node != "" && time.Now().Before(until.(time.Time)) {
			skip = true
		}
		if !skip {
			d := net.Dialer{Timeout: proxyDirectDialTimeout}
			addr := net.JoinHostPort(t.host, strconv.Itoa(int(t.port)))
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err == nil || t.pod == nil || ctx.Err() != nil {
				return conn, err
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				directUnreachable.Store(t.node, time.Now().Add(proxyDirectRetryAfter))
			}
			s.log.Debug("proxy: direct dial failed, asking the node agent", "addr", addr, "node", t.node, "err", err)
		}
	}
	if t.pod == nil {
		return nil, fmt.Errorf("no route to %s", t.host)
	}
	return s.dialThroughAgent(ctx, t.pod, t.agentPort)
}

// dialThroughAgent opens a port-forward stream to port of pod through its
// node's agent, as a net.Conn.
func (s *Server) dialThroughAgent(ctx context.Context, pod *corev1.Pod, port int32) (net.Conn, error) {
	var target *corev1.ContainerStatus
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		if cs.State.Running == nil || cs.ContainerID == "" {
			continue
		}
		if target == nil {
			target = cs
		}
		for _, c := range pod.Spec.Containers {
			if c.Name != cs.Name {
				continue
			}
			for _, cp := range c.Ports {
				if cp.ContainerPort == port {
					target = cs
				}
			}
		}
	}
	if target == nil {
		return nil, fmt.Errorf("pod %s/%s has no running container", pod.Namespace, pod.Name)
	}
	req := nodeapi.StreamRequest{Kind: nodeapi.StreamPortForward, Namespace: pod.Namespace, Pod: pod.Name, PodUID: string(pod.UID),
		Container: target.Name, ContainerID: target.ContainerID, Port: port}
	st, err := s.openStream(ctx, pod, req)
	if err != nil {
		return nil, err
	}
	if err := st.Start(ctx); err != nil {
		st.Close()
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.Background())
	return &streamConn{st: st, ctx: cctx, cancel: cancel,
		remote: proxyAddr(fmt.Sprintf("%s/%s:%d via node %s", pod.Namespace, pod.Name, port, pod.Spec.NodeName))}, nil
}

// streamConn is a net.Conn over a nodeapi port-forward stream: Read
// gets the pod's bytes (io.EOF once the pod closed its side, the agent's
// message when it could not dial), Write sends on channel 0, CloseWrite
// half-closes it, Close ends the stream. Deadlines are not supported
// (net/http's transport does not need them).
type streamConn struct {
	st     *nodeapi.Stream
	ctx    context.Context
	cancel context.CancelFunc
	remote net.Addr

	buf  []byte // Read's only
	rerr error  // Read's only

	once sync.Once
}

func (c *streamConn) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		if c.rerr != nil {
			return 0, c.rerr
		}
		f, err := c.st.Recv(c.ctx)
		switch {
		case err != nil && c.ctx.Err() != nil:
			c.rerr = net.ErrClosed
		case err != nil:
			c.rerr = err
		case f.End != nil && f.End.Status != 0:
			c.rerr = errors.New(f.End.Message)
		case f.End != nil, f.Closed:
			c.rerr = io.EOF
		default:
			c.buf = f.Data
		}
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

func (c *streamConn) Write(p []byte) (int, error) {
	if err := c.st.Send(c.ctx, 0, p); err != nil {
		if c.ctx.Err() != nil {
			return 0, net.ErrClosed
		}
		return 0, err
	}
	return len(p), nil
}

// CloseWrite tells the pod that no more bytes come.
func (c *streamConn) CloseWrite() error { return c.st.CloseSend(c.ctx, 0) }

func (c *streamConn) Close() error {
	c.once.Do(func() {
		c.cancel()
		_ = c.st.End(nodeapi.StreamEnd{})
	})
	return nil
}

func (c *streamConn) LocalAddr() net.Addr              { return proxyAddr("apiserver") }
func (c *streamConn) RemoteAddr() net.Addr             { return c.remote }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }

type proxyAddr string

func (a proxyAddr) Network() string { return "nodeapi" }
func (a proxyAddr) String() string  { return string(a) }
