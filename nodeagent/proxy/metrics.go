package proxy

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, all labelled namespace, service, port (the Service port's
// name) and protocol (TCP, UDP):
//
//   - orca_proxy_connections_total: TCP connections relayed to an endpoint
//     and UDP flows started;
//   - orca_proxy_bytes_total{direction="in"|"out"}: bytes relayed from
//     clients to endpoints (in) and back (out); a TCP connection's bytes
//     are counted per MiB and when each direction ends;
//   - orca_proxy_errors_total{reason="dial"|"no_endpoints"|"limit"}: failed
//     dials of an endpoint (each is retried on the next, see
//     maxDialAttempts), connections or datagrams dropped because no
//     endpoint takes them (only in the instant endpoints go: without any,
//     the port does not listen), and connections reset or datagrams
//     dropped because the proxy holds Config.MaxConnections already;
//   - orca_proxy_active: TCP connections and UDP flows open now;
//   - orca_proxy_endpoints_skipped{reason="self"|"address"}: endpoints of
//     the port never dialled because they are an address the proxy or the
//     agent listens on (self) or not a usable IP address (address, see
//     checkEndpoint).
type metrics struct {
	conns  *prometheus.CounterVec
	bytes  *prometheus.CounterVec
	errs   *prometheus.CounterVec
	active *prometheus.GaugeVec
	skip   *prometheus.GaugeVec
}

func newMetrics(r prometheus.Registerer) (*metrics, error) {
	labels := []string{"namespace", "service", "port", "protocol"}
	m := &metrics{
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orca_proxy_connections_total",
			Help: "TCP connections relayed to a Service endpoint and UDP flows started, per Service port."}, labels),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orca_proxy_bytes_total",
			Help: "Bytes relayed per Service port, from clients to endpoints (direction in) and back (out)."}, append(labels, "direction")),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orca_proxy_errors_total",
			Help: "Failed endpoint dials (reason dial) and connections or datagrams dropped without an endpoint (reason no_endpoints), per Service port."}, append(labels, "reason")),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "orca_proxy_active",
			Help: "TCP connections and UDP flows open now, per Service port."}, labels),
		skip: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "orca_proxy_endpoints_skipped",
			Help: "Endpoints never dialled, per Service port: an address the proxy or the agent listens on (reason self) or not a usable IP address (reason address)."}, append(labels, "reason")),
	}
	if r == nil {
		return m, nil
	}
	// Several proxies on one registry (agents in one process) share the
	// series of the first.
	var err error
	if m.conns, err = register(r, m.conns); err != nil {
		return nil, err
	}
	if m.bytes, err = register(r, m.bytes); err != nil {
		return nil, err
	}
	if m.errs, err = register(r, m.errs); err != nil {
		return nil, err
	}
	if m.active, err = register(r, m.active); err != nil {
		return nil, err
	}
	if m.skip, err = register(r, m.skip); err != nil {
		return nil, err
	}
	return m, nil
}

// portMetrics are one Service port's metric children, resolved once.
type portMetrics struct {
	labels             []string
	conns              prometheus.Counter
	bytesIn, bytesOut  prometheus.Counter
	dialErrs, noEndpts prometheus.Counter
	limit              prometheus.Counter
	active             prometheus.Gauge
	skipSelf, skipAddr prometheus.Gauge
}

// skipped returns the orca_proxy_endpoints_skipped child of reason.
func (pm *portMetrics) skipped(reason string) prometheus.Gauge {
	if reason == skipSelf {
		return pm.skipSelf
	}
	return pm.skipAddr
}

func (m *metrics) forPort(namespace, service, port, protocol string) *portMetrics {
	l := []string{namespace, service, port, protocol}
	return &portMetrics{
		labels:   l,
		conns:    m.conns.WithLabelValues(l...),
		bytesIn:  m.bytes.WithLabelValues(append(l[:4:4], "in")...),
		bytesOut: m.bytes.WithLabelValues(append(l[:4:4], "out")...),
		dialErrs: m.errs.WithLabelValues(append(l[:4:4], "dial")...),
		noEndpts: m.errs.WithLabelValues(append(l[:4:4], "no_endpoints")...),
		limit:    m.errs.WithLabelValues(append(l[:4:4], "limit")...),
		active:   m.active.WithLabelValues(l...),
		skipSelf: m.skip.WithLabelValues(append(l[:4:4], skipSelf)...),
		skipAddr: m.skip.WithLabelValues(append(l[:4:4], skipAddress)...),
	}
}

// drop removes a Service port's series once the port is gone.
func (m *metrics) drop(pm *portMetrics) {
	l := pm.labels
	m.conns.DeleteLabelValues(l...)
	m.active.DeleteLabelValues(l...)
	for _, d := range []string{"in", "out"} {
		m.bytes.DeleteLabelValues(append(l[:4:4], d)...)
	}
	for _, r := range []string{"dial", "no_endpoints", "limit"} {
		m.errs.DeleteLabelValues(append(l[:4:4], r)...)
	}
	for _, r := range []string{skipSelf, skipAddress} {
		m.skip.DeleteLabelValues(append(l[:4:4], r)...)
	}
}

// register registers c on r, or returns the collector already registered
// under its name.
func register[C prometheus.Collector](r prometheus.Registerer, c C) (C, error) {
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if ex, ok := are.ExistingCollector.(C); ok {
				return ex, nil
			}
		}
		return c, err
	}
	return c, nil
}
