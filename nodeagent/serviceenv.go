package nodeagent

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
)

// masterServiceNamespace and masterServices name the Services whose
// variables every pod gets, as the kubelet's (the apiserver's
// "kubernetes" Service in "default").
const masterServiceNamespace = metav1.NamespaceDefault

var masterServices = map[string]bool{"kubernetes": true}

// serviceEnv returns the Service environment variables of a pod in
// namespace ns, as the kubelet's getServiceEnvVarMap and
// pkg/kubelet/envvars.FromServices: for each Service with a ClusterIP
// (not None, not ExternalName) in ns when enableServiceLinks (nil: true),
// and for the master Services of "default" always, <SVC>_SERVICE_HOST,
// <SVC>_SERVICE_PORT (the first port), <SVC>_SERVICE_PORT_<NAME> for
// named ports and Docker link variables: <SVC>_PORT=<proto>://<ip>:<port>
// of the first port and, per port, <SVC>_PORT_<port>_<PROTO> with
// _PROTO, _PORT and _ADDR. <SVC> is the name upper-cased with '-' as '_'.
// Variables come in Service name order, each Service's in the kubelet's
// order.
func serviceEnv(services []*corev1.Service, ns string, enableServiceLinks *bool) []corev1.EnvVar {
	links := enableServiceLinks == nil || *enableServiceLinks
	byName := map[string]*corev1.Service{}
	for _, s := range services {
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == corev1.ClusterIPNone || len(s.Spec.Ports) == 0 {
			continue
		}
		switch {
		case s.Namespace == masterServiceNamespace && masterServices[s.Name]:
			if _, ok := byName[s.Name]; !ok {
				byName[s.Name] = s
			}
		case s.Namespace == ns && links:
			byName[s.Name] = s
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []corev1.EnvVar
	for _, n := range names {
		s := byName[n]
		prefix := envName(s.Name)
		ip := s.Spec.ClusterIP
		out = append(out,
			corev1.EnvVar{Name: prefix + "_SERVICE_HOST", Value: ip},
			corev1.EnvVar{Name: prefix + "_SERVICE_PORT", Value: strconv.Itoa(int(s.Spec.Ports[0].Port))})
		for _, p := range s.Spec.Ports {
			if p.Name != "" {
				out = append(out, corev1.EnvVar{Name: prefix + "_SERVICE_PORT_" + envName(p.Name), Value: strconv.Itoa(int(p.Port))})
			}
		}
		for i, p := range s.Spec.Ports {
			proto := string(p.Protocol)
			if proto == "" {
				proto = string(corev1.ProtocolTCP)
			}
			lower := strings.ToLower(proto)
			url := fmt.Sprintf("%s://%s", lower, net.JoinHostPort(ip, strconv.Itoa(int(p.Port))))
			if i == 0 {
				out = append(out, corev1.EnvVar{Name: prefix + "_PORT", Value: url})
			}
			pp := fmt.Sprintf("%s_PORT_%d_%s", prefix, p.Port, strings.ToUpper(proto))
			out = append(out,
				corev1.EnvVar{Name: pp, Value: url},
				corev1.EnvVar{Name: pp + "_PROTO", Value: lower},
				corev1.EnvVar{Name: pp + "_PORT", Value: strconv.Itoa(int(p.Port))},
				corev1.EnvVar{Name: pp + "_ADDR", Value: ip})
		}
	}
	return out
}

// envName is the kubelet's makeEnvVariableName.
func envName(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

// podServiceEnv is serviceEnv over the agent's Services informer.
func (w *podWorker) podServiceEnv() []corev1.EnvVar {
	var svcs []*corev1.Service
	add := func(objs []store.Object) {
		for _, o := range objs {
			if s, ok := o.(*corev1.Service); ok {
				svcs = append(svcs, s)
			}
		}
	}
	add(w.a.services.List(w.ns, nil))
	if w.ns != masterServiceNamespace {
		for n := range masterServices {
			if o, ok := w.a.services.Get(masterServiceNamespace, n); ok {
				add([]store.Object{o})
			}
		}
	}
	return serviceEnv(svcs, w.ns, w.pod.Spec.EnableServiceLinks)
}
