package endpoints

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// LabelHeadless marks the Endpoints of a headless Service, as Kubernetes'.
const LabelHeadless = corev1.IsHeadlessService

// sync converges the Endpoints of Service key ("namespace/name").
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	obj, ok := c.services.Get(ns, name)
	if !ok {
		_, err := c.s.Delete(ctx, store.Endpoints, ns, name, "")
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete endpoints %s: %w", key, err)
		}
		return nil
	}
	svc := obj.(*corev1.Service)
	if svc.Spec.Selector == nil {
		return nil // Endpoints of a selector-less Service are the user's
	}
	var pods []*corev1.Pod
	for _, o := range c.pods.List(ns, labels.SelectorFromValidatedSet(svc.Spec.Selector)) {
		pods = append(pods, o.(*corev1.Pod))
	}
	subsets := ComputeSubsets(svc, pods)

	lbls := map[string]string{}
	for k, v := range svc.Labels {
		lbls[k] = v
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		lbls[LabelHeadless] = ""
	}
	if len(lbls) == 0 {
		lbls = nil
	}

	var cur *corev1.Endpoints
	if o, ok := c.endpoints.Get(ns, name); ok {
		cur = o.(*corev1.Endpoints)
	}
	if cur != nil && apiequality.Semantic.DeepEqual(cur.Subsets, subsets) && apiequality.Semantic.DeepEqual(cur.Labels, lbls) {
		return nil
	}
	if cur == nil {
		ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls}, Subsets: subsets}
		_, err := c.reg.Create(ctx, c.s, store.Endpoints, ep)
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create endpoints %s: exists but not yet in cache: %w", key, err)
		}
		if err != nil {
			return fmt.Errorf("create endpoints %s: %w", key, err)
		}
		return nil
	}
	// At the revision the cache showed: a conflict requeues the service.
	_, err := c.reg.GuaranteedUpdate(ctx, c.s, store.Endpoints, ns, name, &store.Preconditions{ResourceVersion: &cur.ResourceVersion}, func(obj store.Object) (store.Object, error) {
		ep := obj.(*corev1.Endpoints)
		ep.Subsets = subsets
		ep.Labels = lbls
		return ep, nil
	})
	if err != nil {
		return fmt.Errorf("update endpoints %s: %w", key, err)
	}
	return nil
}

// ComputeSubsets returns the Endpoints subsets of svc over pods (already
// selected by svc's selector): a pod with status.podIP set, not being
// deleted and not terminated is an address (ready when its Ready condition
// is True or svc publishes not-ready addresses, else a notReadyAddress).
// Its ports are svc's ports whose targetPort resolves on the pod (as
// podutil.FindPort), each mapped to the node port from the pod's
// host-ports annotation (the containerPort itself when absent); when a
// port maps to a node port the address is the pod's status.hostIP (its
// ports are served there: pod IPs are reachable from their node only,
// until the pod network spans the cluster), else its status.podIP. Addresses
// with the same port list share a subset; subsets, addresses and ports are
// sorted so that the result is deterministic.
func ComputeSubsets(svc *corev1.Service, pods []*corev1.Pod) []corev1.EndpointSubset {
	type group struct {
		ports           []corev1.EndpointPort
		ready, notReady []corev1.EndpointAddress
	}
	groups := map[string]*group{}
	for _, pod := range pods {
		if pod.Status.PodIP == "" || pod.DeletionTimestamp != nil ||
			pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		hostPorts, err := nodeapi.DecodeHostPorts(pod.Annotations[nodeapi.AnnotationHostPorts])
		if err != nil {
			slog.Warn("endpoints: ignoring bad host-ports annotation", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			hostPorts = map[int32]int32{}
		}
		var ports []corev1.EndpointPort
		viaNode := false // a port is served on the node: the address is status.hostIP
		for i := range svc.Spec.Ports {
			sp := &svc.Spec.Ports[i]
			cp, err := FindPort(pod, sp)
			if err != nil {
				continue
			}
			port := cp
			if hp, ok := hostPorts[cp]; ok && hp > 0 {
				port, viaNode = hp, true
			}
			ports = append(ports, corev1.EndpointPort{Name: sp.Name, Port: port, Protocol: protocolOf(sp.Protocol), AppProtocol: sp.AppProtocol})
		}
		if len(ports) == 0 && len(svc.Spec.Ports) > 0 {
			continue // no service port resolves on this pod
		}
		sort.Slice(ports, func(i, j int) bool { return ports[i].Name < ports[j].Name })
		k := portsKey(ports)
		g, ok := groups[k]
		if !ok {
			g = &group{ports: ports}
			groups[k] = g
		}
		node := pod.Spec.NodeName
		ip := pod.Status.PodIP
		if viaNode && pod.Status.HostIP != "" {
			ip = pod.Status.HostIP
		}
		addr := corev1.EndpointAddress{
			IP: ip,
			TargetRef: &corev1.ObjectReference{
				Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			},
		}
		if node != "" {
			addr.NodeName = &node
		}
		if ctrlutil.IsPodReady(pod) || svc.Spec.PublishNotReadyAddresses {
			g.ready = append(g.ready, addr)
		} else {
			g.notReady = append(g.notReady, addr)
		}
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []corev1.EndpointSubset
	for _, k := range keys {
		g := groups[k]
		sortAddresses(g.ready)
		sortAddresses(g.notReady)
		out = append(out, corev1.EndpointSubset{Addresses: g.ready, NotReadyAddresses: g.notReady, Ports: g.ports})
	}
	return out
}

func protocolOf(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

func portsKey(ports []corev1.EndpointPort) string {
	var b strings.Builder
	for _, p := range ports {
		b.WriteString(p.Name + "/" + string(p.Protocol) + "/" + strconv.Itoa(int(p.Port)) + ";")
	}
	return b.String()
}

// sortAddresses orders by IP, then pod name: pods share the node's IP in
// orca, so the IP alone does not identify an address.
func sortAddresses(a []corev1.EndpointAddress) {
	sort.Slice(a, func(i, j int) bool {
		if a[i].IP != a[j].IP {
			return a[i].IP < a[j].IP
		}
		return a[i].TargetRef.Name < a[j].TargetRef.Name
	})
}

// FindPort returns the containerPort svcPort's targetPort refers to on
// pod, as Kubernetes' podutil.FindPort: a number is used as is (unset
// means svcPort.port), a name is looked up among the containers' (and
// restartable init containers') ports with the same protocol.
func FindPort(pod *corev1.Pod, svcPort *corev1.ServicePort) (int32, error) {
	tp := svcPort.TargetPort
	switch {
	case tp.Type == intstr.String && tp.StrVal != "":
		proto := protocolOf(svcPort.Protocol)
		ctrs := append([]corev1.Container(nil), pod.Spec.Containers...)
		for _, ic := range pod.Spec.InitContainers {
			if ic.RestartPolicy != nil && *ic.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				ctrs = append(ctrs, ic) // a sidecar: it keeps running
			}
		}
		for _, ctr := range ctrs {
			for _, p := range ctr.Ports {
				if p.Name == tp.StrVal && protocolOf(p.Protocol) == proto {
					return p.ContainerPort, nil
				}
			}
		}
		return 0, fmt.Errorf("pod %s/%s has no container port named %q (%s)", pod.Namespace, pod.Name, tp.StrVal, proto)
	case tp.Type == intstr.Int && tp.IntVal != 0:
		return tp.IntVal, nil
	default:
		return svcPort.Port, nil
	}
}
