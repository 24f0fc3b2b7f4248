package apiserver

import (
	"context"
	"net/http"
	"sort"
	"time"

	"github.com/labstack/echo/v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
)

// metricsGroup is metrics-server's API group, served here from the
// agents' usage samples (nodeapi.MetricsBucket).
const metricsGroup = "metrics.k8s.io"

// Why a KV bucket and not a request to each agent over the relay: with
// 1,000 nodes, `kubectl top pods -A` (and an HPA every 15 s) would fan
// out to every node and wait for the slowest; with the bucket, each
// agent puts one small value per resolution (about 67 puts/s for 1,000
// nodes at 15 s), the apiserver keeps the latest of each node from one
// watch and answers from memory, and a dead node's value expires
// (nodeapi.MetricsTTL), as metrics-server drops nodes it cannot scrape.

func metricsGroupDiscovery() metav1.APIGroup {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: metricsGroup + "/v1beta1", Version: "v1beta1"}
	return metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: metricsGroup, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
}

func metricsAPIResources() []metav1.APIResource {
	return []metav1.APIResource{
		{Name: "nodes", Kind: "NodeMetrics", Verbs: metav1.Verbs{"get", "list"}},
		{Name: "pods", Kind: "PodMetrics", Namespaced: true, Verbs: metav1.Verbs{"get", "list"}},
	}
}

// metrics returns the server's cache of the agents' samples
// (Config.Metrics, or its own), started on first use.
func (s *Server) metrics(ctx context.Context) (*nodeapi.MetricsCache, error) {
	return s.metricsCache, s.metricsCache.Start(ctx)
}

// metricsAPI answers /apis/metrics.k8s.io/...: discovery, and get/list of
// NodeMetrics and PodMetrics (all namespaces or one, labelSelector), as
// metrics-server: a node's or pod's labels are its object's, its
// timestamp the end of its sample window. Pods and nodes without a
// sample are left out of lists and are NotFound to get.
func (s *Server) metricsAPI(c echo.Context) error {
	req := c.Request()
	p := req.URL.EscapedPath()
	segs := splitPath(p)
	if req.Method != http.MethodGet {
		return apiMethodNotAllowed(req.Method, p)
	}
	switch {
	case len(segs) == 2:
		return c.JSON(http.StatusOK, metricsGroupDiscovery())
	case segs[2] != "v1beta1":
		return notFoundPath(p)
	case len(segs) == 3:
		return c.JSON(http.StatusOK, metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: metricsGroup + "/v1beta1", APIResources: metricsAPIResources()})
	}
	rest, namespace := segs[3:], ""
	if len(rest) >= 3 && rest[0] == "namespaces" {
		namespace, rest = rest[1], rest[2:]
	}
	if len(rest) == 0 || len(rest) > 2 || (rest[0] == "nodes" && namespace != "") || (rest[0] != "nodes" && rest[0] != "pods") {
		return notFoundPath(p)
	}
	name := ""
	if len(rest) == 2 {
		name = rest[1]
	}
	sel := labels.Everything()
	if ls := req.URL.Query().Get("labelSelector"); ls != "" {
		var err error
		if sel, err = labels.Parse(ls); err != nil {
			return apierrors.NewBadRequest(err.Error())
		}
	}
	ctx := req.Context()
	m, err := s.metrics(ctx)
	if err != nil {
		return apierrors.NewServiceUnavailable("metrics: " + err.Error())
	}
	if rest[0] == "nodes" {
		return s.nodeMetrics(c, m, name, sel)
	}
	return s.podMetrics(c, m, namespace, name, sel)
}

func (s *Server) nodeMetrics(c echo.Context, m *nodeapi.MetricsCache, name string, sel labels.Selector) error {
	ctx := c.Request().Context()
	objs, _, err := s.st.List(ctx, store.Nodes, "")
	if err != nil {
		return err
	}
	nodes := map[string]*corev1.Node{}
	for _, o := range objs {
		n := o.(*corev1.Node)
		nodes[n.Name] = n
	}
	list := metricsv1beta1.NodeMetricsList{TypeMeta: metav1.TypeMeta{Kind: "NodeMetricsList", APIVersion: metricsGroup + "/v1beta1"}, Items: []metricsv1beta1.NodeMetrics{}}
	for _, smp := range m.Fresh(time.Now()) {
		n := nodes[smp.Node]
		if n == nil || smp.Window <= 0 || (name != "" && smp.Node != name) || !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		list.Items = append(list.Items, metricsv1beta1.NodeMetrics{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, CreationTimestamp: metav1.Now()},
			Timestamp:  metav1.NewTime(smp.Timestamp), Window: metav1.Duration{Duration: smp.Window},
			Usage: usage(smp.CPU, smp.Memory),
		})
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	if name != "" {
		if len(list.Items) == 0 {
			return apierrors.NewNotFound(schema.GroupResource{Group: metricsGroup, Resource: "nodes"}, name)
		}
		it := list.Items[0]
		it.TypeMeta = metav1.TypeMeta{Kind: "NodeMetrics", APIVersion: metricsGroup + "/v1beta1"}
		return c.JSON(http.StatusOK, it)
	}
	return c.JSON(http.StatusOK, list)
}

func (s *Server) podMetrics(c echo.Context, m *nodeapi.MetricsCache, namespace, name string, sel labels.Selector) error {
	ctx := c.Request().Context()
	objs, _, err := s.st.List(ctx, store.Pods, namespace)
	if err != nil {
		return err
	}
	pods := map[string]*corev1.Pod{}
	for _, o := range objs {
		p := o.(*corev1.Pod)
		pods[p.Namespace+"/"+p.Name] = p
	}
	list := metricsv1beta1.PodMetricsList{TypeMeta: metav1.TypeMeta{Kind: "PodMetricsList", APIVersion: metricsGroup + "/v1beta1"}, Items: []metricsv1beta1.PodMetrics{}}
	for _, ps := range m.PodSamples(namespace, time.Now()) {
		p := pods[ps.Namespace+"/"+ps.Name]
		if p == nil || !ps.Of(string(p.UID), p.Spec.NodeName) || (name != "" && ps.Name != name) || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		pm := metricsv1beta1.PodMetrics{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, CreationTimestamp: metav1.Now()},
			Timestamp:  metav1.NewTime(ps.Timestamp), Window: metav1.Duration{Duration: ps.Window},
			Containers: []metricsv1beta1.ContainerMetrics{},
		}
		for _, cs := range ps.Containers {
			pm.Containers = append(pm.Containers, metricsv1beta1.ContainerMetrics{Name: cs.Name, Usage: usage(cs.CPU, cs.Memory)})
		}
		sort.Slice(pm.Containers, func(i, j int) bool { return pm.Containers[i].Name < pm.Containers[j].Name })
		list.Items = append(list.Items, pm)
	}
	sort.Slice(list.Items, func(i, j int) bool {
		a, b := list.Items[i], list.Items[j]
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
	})
	if name != "" {
		if len(list.Items) == 0 {
			return apierrors.NewNotFound(schema.GroupResource{Group: metricsGroup, Resource: "pods"}, name)
		}
		it := list.Items[0]
		it.TypeMeta = metav1.TypeMeta{Kind: "PodMetrics", APIVersion: metricsGroup + "/v1beta1"}
		return c.JSON(http.StatusOK, it)
	}
	return c.JSON(http.StatusOK, list)
}

// usage is a ResourceList of cpu in nanocores and memory in bytes, in
// metrics-server's formats (cpu "123456n", memory "1234Ki").
func usage(cpu, mem uint64) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewScaledQuantity(int64(cpu), resource.Nano),
		corev1.ResourceMemory: *resource.NewQuantity(int64(mem), resource.BinarySI),
	}
}
