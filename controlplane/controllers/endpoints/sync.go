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
// selected by svc's selector), as kube-controller-manager's
// EndpointController: a pod is an address when ShouldPodBeInEndpoints
// (status.podIP set, not Succeeded or Failed, not terminating unless svc
// publishes not-ready addresses); it is ready when its Ready condition is
// True or svc publishes not-ready addresses, else a notReadyAddress. Its
// ports are PodPorts: podIP:targetPort, the targetPort resolved per pod.
// A pod whose hostname and subdomain name svc gets the hostname. Addresses
// with the same port list share a subset; subsets, addresses and ports are
// sorted so that the result is deterministic.
func ComputeSubsets(svc *corev1.Service, pods []*corev1.Pod) []corev1.EndpointSubset {
	type group struct {
		ports           []corev1.EndpointPort
		ready, notReady []corev1.EndpointAddress
	}
	groups := map[string]*group{}
	for _, pod := range pods {
		if !ShouldPodBeInEndpoints(pod, svc.Spec.PublishNotReadyAddresses) {
			continue
		}
		ip, ports, ok := PodPorts(svc, pod)
		if !ok {
			continue // no service port resolves on this pod
		}
		k := portsKey(ports)
		g, ok := groups[k]
		if !ok {
			g = &group{ports: ports}
			groups[k] = g
		}
		node := pod.Spec.NodeName
		addr := corev1.EndpointAddress{
			IP:       ip,
			Hostname: Hostname(svc, pod),
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

// ShouldPodBeInEndpoints is Kubernetes' endpointutil.ShouldPodBeInEndpoints:
// a pod with status.podIP that is not Succeeded or Failed, and not
// terminating (deletionTimestamp set) unless includeTerminating.
func ShouldPodBeInEndpoints(pod *corev1.Pod, includeTerminating bool) bool {
	switch {
	case pod.Status.PodIP == "":
		return false
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return false
	case pod.DeletionTimestamp != nil && !includeTerminating:
		return false
	}
	return true
}

// Hostname is the hostname an address of pod in svc carries, as
// Kubernetes': the pod's spec.hostname when its spec.subdomain is svc's
// name (a StatefulSet's pods under its governing Service), else "".
func Hostname(svc *corev1.Service, pod *corev1.Pod) string {
	if pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name && pod.Namespace == svc.Namespace {
		return pod.Spec.Hostname
	}
	return ""
}

// PodPorts returns the address and ports pod serves svc on: its
// status.podIP and, for each of svc's ports whose targetPort resolves on
// the pod (FindPort: a name is looked up in this pod's containers), the
// containerPort, with the Service port's name, protocol (TCP when unset)
// and appProtocol, sorted by name. ok is false when svc has ports and none
// resolves. Host ports are never published, with one exception for
// agents that predate the pod network (version skew): a pod without an
// address of its own (podIP equal to hostIP, or hostIP unknown) whose agent
// serves a containerPort on a node port (annotation
// nodeapi.AnnotationHostPorts) is published at hostIP and that port.
func PodPorts(svc *corev1.Service, pod *corev1.Pod) (ip string, ports []corev1.EndpointPort, ok bool) {
	ip = pod.Status.PodIP
	var hostPorts map[int32]int32
	if a := pod.Annotations[nodeapi.AnnotationHostPorts]; a != "" && (pod.Status.HostIP == "" || pod.Status.HostIP == pod.Status.PodIP) {
		var err error
		if hostPorts, err = nodeapi.DecodeHostPorts(a); err != nil {
			slog.Warn("endpoints: ignoring bad host-ports annotation", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			hostPorts = nil
		}
	}
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		cp, err := FindPort(pod, sp)
		if err != nil {
			continue
		}
		if hp, ok := hostPorts[cp]; ok && hp > 0 {
			cp = hp
			if pod.Status.HostIP != "" {
				ip = pod.Status.HostIP
			}
		}
		ports = append(ports, corev1.EndpointPort{Name: sp.Name, Port: cp, Protocol: protocolOf(sp.Protocol), AppProtocol: sp.AppProtocol})
	}
	if len(ports) == 0 && len(svc.Spec.Ports) > 0 {
		return "", nil, false
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i].Name < ports[j].Name })
	return ip, ports, true
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

// sortAddresses orders by IP, then pod name (pods of an agent that
// predates the pod network share the node's IP).
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
