package apiserver

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/orca-edge/orca/controlplane/store"
)

// table renders objs as a meta.k8s.io Table, the server-side printing
// kubectl get asks for, with the columns of Kubernetes' own printers
// (pkg/printers/internalversion) for pods, deployments, replicasets,
// services, endpoints, nodes, namespaces and runtimeclasses, and NAME/AGE
// for the rest. includeObject is "None", "Object" or "Metadata" (default):
// what each row carries in its object field.
func (s *Server) table(r store.Resource, objs []store.Object, rv, version, includeObject string) *metav1.Table {
	if version == "" {
		version = "v1"
	}
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/" + version}}
	t.ResourceVersion = rv
	col := func(name, typ, desc string, prio int32) metav1.TableColumnDefinition {
		return metav1.TableColumnDefinition{Name: name, Type: typ, Format: map[string]string{"Name": "name"}[name], Description: desc, Priority: prio}
	}
	nameCol := col("Name", "string", "Name must be unique within a namespace.", 0)
	ageCol := col("Age", "string", "CreationTimestamp is the time the object was created.", 0)
	switch r.Kind {
	case "Pod":
		t.ColumnDefinitions = []metav1.TableColumnDefinition{nameCol, col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", 0),
			col("Status", "string", "The aggregate status of the containers in this pod.", 0), col("Restarts", "string", "The number of times the containers in this pod have been restarted.", 0),
			ageCol, col("IP", "string", "IP address allocated to the pod.", 1), col("Node", "string", "Name of the node the pod is assigned to.", 1)}
	case "Deployment":
		t.ColumnDefinitions = []metav1.TableColumnDefinition{nameCol, col("Ready", "string", "Number of the pod with ready state", 0),
			col("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the desired template spec.", 0),
			col("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.", 0), ageCol,
			col("Containers", "string", "Names of each container in the template.", 1), col("Images", "string", "Images referenced by each container in the template.", 1),
			col("Selector", "string", "Label selector for pods.", 1)}
	case "ReplicaSet":
		t.ColumnDefinitions = []metav1.TableColumnDefinition{nameCol, col("Desired", "integer", "Number of desired pods.", 0),
			col("Current", "integer", "Number of actual replicas.", 0), col("Ready", "integer", "The number of ready replicas.", 0), ageCol,
			col("Containers", "string", "Names of each container in the template.", 1), col("Images", "string", "Images referenced by each container in the template.", 1),
			col("Selector", "string", "Label selector for pods.", 1)}
	case "Service":
		t.ColumnDefinitions = []metav1.TableColumnDefinition{nameCol, col("Type", "string", "The type of the service.", 0),
			col("Cluster-IP", "string", "IP address of the service.", 0), col("External-IP", "string", "External IP of the service.", 0),
			col("Port(s)", "string", "The ports of the service.", 0), ageCol, col("Selector", "string", "The service's selector.", 1)}
	case "Endpoints":
		t.ColumnDefinitions = []metav1.TableColumnDefinition{nameCol, col("Endpoints", "string", "Endpoints of the service.", 0), ageCol}
	case "Node":
		t.ColumnDefinitions = []metav1.TableColumnDefinition{nameCol, col("Status", "string", "The status of the node.", 0),
			col("Roles", "string", "The roles of the node.", 0), ageCol, col("Version", "string", "Kubelet version reported by the node.", 0),
			col("Internal-IP", "string", "The node's internal IP.", 1)}
	case "Namespace":
		t.ColumnDefinitions = []metav1.TableColumnDefinition{nameCol, col("Status", "string", "The status of the namespace.", 0), ageCol}
	case "RuntimeClass":
		t.ColumnDefinitions = []metav1.TableColumnDefinition{nameCol, col("Handler", "string", "The handler of the runtime class.", 0), ageCol}
	case "EndpointSlice":
		t.ColumnDefinitions = []metav1.TableColumnDefinition{nameCol, col("AddressType", "string", "The IP protocol for this slice.", 0),
			col("Ports", "string", "The ports contained in this slice.", 0), col("Endpoints", "string", "Endpoints in this slice.", 0), ageCol}
	case "Event":
		t.ColumnDefinitions = []metav1.TableColumnDefinition{col("Last Seen", "string", "Time when this Event was last seen.", 0),
			col("Type", "string", "Type of this event (Normal, Warning).", 0), col("Reason", "string", "Why the action was taken.", 0),
			col("Object", "string", "The object this Event is about.", 0), col("Message", "string", "A human-readable description of the status of this operation.", 0),
			col("Source", "string", "The component reporting this event.", 1), col("Count", "integer", "The number of times this event has occurred.", 1),
			nameCol}
	default:
		t.ColumnDefinitions = []metav1.TableColumnDefinition{nameCol, ageCol}
	}
	t.Rows = make([]metav1.TableRow, 0, len(objs))
	for _, o := range objs {
		row := metav1.TableRow{Cells: cells(o)}
		switch includeObject {
		case "None":
		case "Object":
			b, _ := json.Marshal(o)
			row.Object = runtime.RawExtension{Raw: b}
		default:
			pm := metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}}
			if m, ok := o.(metav1.ObjectMetaAccessor); ok {
				pm.ObjectMeta = *m.GetObjectMeta().(*metav1.ObjectMeta)
			}
			b, _ := json.Marshal(pm)
			row.Object = runtime.RawExtension{Raw: b}
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

func age(o store.Object) string {
	ts := o.GetCreationTimestamp()
	if ts.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(ts.Time))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// cells returns a row's cells in the order of table's columns.
func cells(o store.Object) []any {
	switch x := o.(type) {
	case *discoveryv1.EndpointSlice:
		var ports, addrs []string
		for _, p := range x.Ports {
			if p.Port != nil {
				ports = append(ports, fmt.Sprint(*p.Port))
			}
		}
		for _, e := range x.Endpoints {
			addrs = append(addrs, e.Addresses...)
		}
		return []any{x.Name, string(x.AddressType), orNone(strings.Join(ports, ",")), orNone(strings.Join(addrs, ",")), age(o)}
	case *corev1.Event:
		last := x.LastTimestamp.Time
		if last.IsZero() {
			last = x.EventTime.Time
		}
		if last.IsZero() {
			last = x.CreationTimestamp.Time
		}
		seen := "<unknown>"
		if !last.IsZero() {
			seen = duration.HumanDuration(time.Since(last))
		}
		object := strings.ToLower(x.InvolvedObject.Kind) + "/" + x.InvolvedObject.Name
		source := x.Source.Component
		if x.Source.Host != "" {
			source += ", " + x.Source.Host
		}
		return []any{seen, x.Type, x.Reason, object, strings.TrimSpace(x.Message), orNone(source), max(x.Count, 1), x.Name}
	case *corev1.Pod:
		ready, restarts := 0, int32(0)
		for _, cs := range x.Status.ContainerStatuses {
			if cs.Ready {
				ready++
			}
			restarts += cs.RestartCount
		}
		return []any{x.Name, fmt.Sprintf("%d/%d", ready, len(x.Spec.Containers)), podStatus(x), fmt.Sprint(restarts), age(o), orNone(x.Status.PodIP), orNone(x.Spec.NodeName)}
	case *appsv1.Deployment:
		want := int32(1)
		if x.Spec.Replicas != nil {
			want = *x.Spec.Replicas
		}
		names, images := containerCols(x.Spec.Template.Spec.Containers)
		return []any{x.Name, fmt.Sprintf("%d/%d", x.Status.ReadyReplicas, want), x.Status.UpdatedReplicas, x.Status.AvailableReplicas, age(o), names, images, selectorString(x.Spec.Selector)}
	case *appsv1.ReplicaSet:
		want := int32(1)
		if x.Spec.Replicas != nil {
			want = *x.Spec.Replicas
		}
		names, images := containerCols(x.Spec.Template.Spec.Containers)
		return []any{x.Name, want, x.Status.Replicas, x.Status.ReadyReplicas, age(o), names, images, selectorString(x.Spec.Selector)}
	case *corev1.Service:
		var ports []string
		for _, p := range x.Spec.Ports {
			if p.NodePort != 0 {
				ports = append(ports, fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol))
			} else {
				ports = append(ports, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
			}
		}
		ext := "<none>"
		if len(x.Spec.ExternalIPs) > 0 {
			ext = strings.Join(x.Spec.ExternalIPs, ",")
		}
		sel := make([]string, 0, len(x.Spec.Selector))
		for k, v := range x.Spec.Selector {
			sel = append(sel, k+"="+v)
		}
		sort.Strings(sel)
		return []any{x.Name, string(x.Spec.Type), orNone(x.Spec.ClusterIP), ext, orNone(strings.Join(ports, ",")), age(o), orNone(strings.Join(sel, ","))}
	case *corev1.Endpoints:
		var eps []string
		for _, ss := range x.Subsets {
			for _, a := range ss.Addresses {
				for _, p := range ss.Ports {
					eps = append(eps, fmt.Sprintf("%s:%d", a.IP, p.Port))
				}
				if len(ss.Ports) == 0 {
					eps = append(eps, a.IP)
				}
			}
		}
		if len(eps) > 3 {
			eps = append(eps[:3], fmt.Sprintf("+ %d more...", len(eps)-3))
		}
		return []any{x.Name, orNone(strings.Join(eps, ",")), age(o)}
	case *corev1.Node:
		status := "Unknown"
		for _, c := range x.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					status = "Ready"
				} else {
					status = "NotReady"
				}
			}
		}
		if x.Spec.Unschedulable {
			status += ",SchedulingDisabled"
		}
		var roles []string
		for k := range x.Labels {
			if r, ok := strings.CutPrefix(k, "node-role.kubernetes.io/"); ok && r != "" {
				roles = append(roles, r)
			}
		}
		sort.Strings(roles)
		ip := ""
		for _, a := range x.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ip = a.Address
			}
		}
		return []any{x.Name, status, orNone(strings.Join(roles, ",")), age(o), x.Status.NodeInfo.KubeletVersion, orNone(ip)}
	case *corev1.Namespace:
		return []any{x.Name, string(x.Status.Phase), age(o)}
	case *nodev1.RuntimeClass:
		return []any{x.Name, x.Handler, age(o)}
	}
	return []any{o.GetName(), age(o)}
}

// podStatus is kubectl's STATUS column for a pod (simplified from
// printPod): the deletion, a waiting or terminated container's reason, or
// the phase.
func podStatus(p *corev1.Pod) string {
	reason := string(p.Status.Phase)
	if p.Status.Reason != "" {
		reason = p.Status.Reason
	}
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
			reason = cs.State.Waiting.Reason
		case cs.State.Terminated != nil && cs.State.Terminated.Reason != "":
			reason = cs.State.Terminated.Reason
		}
	}
	if p.DeletionTimestamp != nil {
		reason = "Terminating"
	}
	if reason == "" {
		reason = "Pending"
	}
	return reason
}

func containerCols(cs []corev1.Container) (string, string) {
	var n, i []string
	for _, c := range cs {
		n = append(n, c.Name)
		i = append(i, c.Image)
	}
	return strings.Join(n, ","), strings.Join(i, ",")
}

func selectorString(sel *metav1.LabelSelector) string {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || sel == nil {
		return "<none>"
	}
	return s.String()
}
