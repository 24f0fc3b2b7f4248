package store

import (
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Object is what the store keeps: any Kubernetes API object with ObjectMeta.
type Object interface {
	metav1.Object
	runtime.Object
}

// Resource describes one kind of object the store keeps, and so one KV bucket.
type Resource struct {
	// Group is the API group ("" for core), Version its version ("v1").
	Group, Version string
	// Kind is the object's kind ("Pod"), ListKind its list kind ("PodList").
	Kind, ListKind string
	// Plural is the REST resource name and the bucket name ("pods").
	Plural string
	// Singular and ShortNames serve discovery (kubectl get po).
	Singular   string
	ShortNames []string
	// Namespaced kinds are keyed "<namespace>.<name>", others "<name>".
	Namespaced bool
	// New returns an empty object of this kind.
	New func() Object
	// NewList returns an empty list of this kind.
	NewList func() runtime.Object
	// Projection marks a derived bucket whose values keep the
	// resourceVersion of their source object instead of taking the KV
	// revision (see NodePods).
	Projection bool
	// BucketName, when set, names the KV bucket instead of Plural (custom
	// resources: NATS bucket names allow only [A-Za-z0-9_-], so a CRD's
	// bucket is derived from its group and plural).
	BucketName string
}

// GroupVersion returns the resource's API group and version.
func (r Resource) GroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: r.Group, Version: r.Version}
}

// GroupResource returns the resource's group and plural, as used in errors.
func (r Resource) GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: r.Group, Resource: r.Plural}
}

// APIVersion returns "v1" or "apps/v1".
func (r Resource) APIVersion() string { return r.GroupVersion().String() }

// Bucket is the name of the KV bucket holding this resource: BucketName,
// or Plural when that is empty.
func (r Resource) Bucket() string {
	if r.BucketName != "" {
		return r.BucketName
	}
	return r.Plural
}

// The resources orca serves. Each is one KV bucket named after its plural.
var (
	Namespaces = Resource{Version: "v1", Kind: "Namespace", ListKind: "NamespaceList", Plural: "namespaces", Singular: "namespace", ShortNames: []string{"ns"},
		New: func() Object { return &corev1.Namespace{} }, NewList: func() runtime.Object { return &corev1.NamespaceList{} }}
	Nodes = Resource{Version: "v1", Kind: "Node", ListKind: "NodeList", Plural: "nodes", Singular: "node", ShortNames: []string{"no"},
		New: func() Object { return &corev1.Node{} }, NewList: func() runtime.Object { return &corev1.NodeList{} }}
	Pods = Resource{Version: "v1", Kind: "Pod", ListKind: "PodList", Plural: "pods", Singular: "pod", ShortNames: []string{"po"}, Namespaced: true,
		New: func() Object { return &corev1.Pod{} }, NewList: func() runtime.Object { return &corev1.PodList{} }}
	Services = Resource{Version: "v1", Kind: "Service", ListKind: "ServiceList", Plural: "services", Singular: "service", ShortNames: []string{"svc"}, Namespaced: true,
		New: func() Object { return &corev1.Service{} }, NewList: func() runtime.Object { return &corev1.ServiceList{} }}
	Endpoints = Resource{Version: "v1", Kind: "Endpoints", ListKind: "EndpointsList", Plural: "endpoints", Singular: "endpoints", ShortNames: []string{"ep"}, Namespaced: true,
		New: func() Object { return &corev1.Endpoints{} }, NewList: func() runtime.Object { return &corev1.EndpointsList{} }}
	EndpointSlices = Resource{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice", ListKind: "EndpointSliceList", Plural: "endpointslices", Singular: "endpointslice", Namespaced: true,
		New: func() Object { return &discoveryv1.EndpointSlice{} }, NewList: func() runtime.Object { return &discoveryv1.EndpointSliceList{} }}
	ConfigMaps = Resource{Version: "v1", Kind: "ConfigMap", ListKind: "ConfigMapList", Plural: "configmaps", Singular: "configmap", ShortNames: []string{"cm"}, Namespaced: true,
		New: func() Object { return &corev1.ConfigMap{} }, NewList: func() runtime.Object { return &corev1.ConfigMapList{} }}
	Secrets = Resource{Version: "v1", Kind: "Secret", ListKind: "SecretList", Plural: "secrets", Singular: "secret", Namespaced: true,
		New: func() Object { return &corev1.Secret{} }, NewList: func() runtime.Object { return &corev1.SecretList{} }}
	// PersistentVolumes (cluster-scoped, short name pv) and
	// PersistentVolumeClaims (short name pvc) are registered by
	// registry/core; their layouts are here so that orca-agent, which reads
	// them to mount a claim, does not link the registry.
	PersistentVolumes = Resource{Version: "v1", Kind: "PersistentVolume", ListKind: "PersistentVolumeList", Plural: "persistentvolumes", Singular: "persistentvolume", ShortNames: []string{"pv"},
		New: func() Object { return &corev1.PersistentVolume{} }, NewList: func() runtime.Object { return &corev1.PersistentVolumeList{} }}
	PersistentVolumeClaims = Resource{Version: "v1", Kind: "PersistentVolumeClaim", ListKind: "PersistentVolumeClaimList", Plural: "persistentvolumeclaims", Singular: "persistentvolumeclaim", ShortNames: []string{"pvc"}, Namespaced: true,
		New: func() Object { return &corev1.PersistentVolumeClaim{} }, NewList: func() runtime.Object { return &corev1.PersistentVolumeClaimList{} }}
	Events = Resource{Version: "v1", Kind: "Event", ListKind: "EventList", Plural: "events", Singular: "event", ShortNames: []string{"ev"}, Namespaced: true,
		New: func() Object { return &corev1.Event{} }, NewList: func() runtime.Object { return &corev1.EventList{} }}
	Deployments = Resource{Group: "apps", Version: "v1", Kind: "Deployment", ListKind: "DeploymentList", Plural: "deployments", Singular: "deployment", ShortNames: []string{"deploy"}, Namespaced: true,
		New: func() Object { return &appsv1.Deployment{} }, NewList: func() runtime.Object { return &appsv1.DeploymentList{} }}
	ReplicaSets = Resource{Group: "apps", Version: "v1", Kind: "ReplicaSet", ListKind: "ReplicaSetList", Plural: "replicasets", Singular: "replicaset", ShortNames: []string{"rs"}, Namespaced: true,
		New: func() Object { return &appsv1.ReplicaSet{} }, NewList: func() runtime.Object { return &appsv1.ReplicaSetList{} }}
	Leases = Resource{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease", ListKind: "LeaseList", Plural: "leases", Singular: "lease", Namespaced: true,
		New: func() Object { return &coordinationv1.Lease{} }, NewList: func() runtime.Object { return &coordinationv1.LeaseList{} }}
	RuntimeClasses = Resource{Group: "node.k8s.io", Version: "v1", Kind: "RuntimeClass", ListKind: "RuntimeClassList", Plural: "runtimeclasses", Singular: "runtimeclass",
		New: func() Object { return &nodev1.RuntimeClass{} }, NewList: func() runtime.Object { return &nodev1.RuntimeClassList{} }}
)

// NodePods is not an API resource: it is the per-node projection of bound
// pods, keyed "<node>.<namespace>.<name>", that lets a node agent watch only
// its own pods with a subject filter evaluated by the NATS server
// (README, design decision 3). The controlplane's nodepods controller keeps
// it in step with the pods bucket; agents only read it.
var NodePods = Resource{Version: "v1", Kind: "Pod", ListKind: "PodList", Plural: "nodepods", Singular: "pod", Namespaced: true, Projection: true,
	New: func() Object { return &corev1.Pod{} }, NewList: func() runtime.Object { return &corev1.PodList{} }}

// All lists the API resources in discovery order.
var All = []Resource{Namespaces, Nodes, Pods, Services, Endpoints, ConfigMaps, Secrets, Events, Deployments, ReplicaSets, Leases, RuntimeClasses, EndpointSlices}

// NodePodKey returns the NodePods key of a pod bound to node.
func NodePodKey(node, namespace, name string) string {
	return EncodeName(node) + "." + Key(namespace, name)
}
