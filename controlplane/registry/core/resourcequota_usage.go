package core

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Quota evaluation, ported from Kubernetes' pkg/quota/v1/evaluator/core
// (pods.go, services.go, persistent_volume_claims.go) and the generic
// object count evaluator of k8s.io/apiserver/pkg/quota/v1/generic.

// QuotaCountName is the object count resource of res:
// "count/<plural>" in the core group, "count/<plural>.<group>" otherwise.
func QuotaCountName(res store.Resource) corev1.ResourceName {
	if res.Group == "" {
		return corev1.ResourceName("count/" + res.Plural)
	}
	return corev1.ResourceName("count/" + res.Plural + "." + res.Group)
}

// legacyCountNames are the object counts quota names without count/.
var legacyCountNames = map[string]corev1.ResourceName{
	"services": corev1.ResourceServices, "secrets": corev1.ResourceSecrets, "configmaps": corev1.ResourceConfigMaps,
	"persistentvolumeclaims": corev1.ResourcePersistentVolumeClaims, "resourcequotas": corev1.ResourceQuotas,
	"replicationcontrollers": corev1.ResourceReplicationControllers,
}

// QuotaMatchesResource reports whether quota resource name n is charged
// by objects of res (the evaluator's MatchingResources).
func QuotaMatchesResource(res store.Resource, n corev1.ResourceName) bool {
	if n == QuotaCountName(res) {
		return true
	}
	if res.Group != "" {
		return false
	}
	s := string(n)
	switch res.Plural {
	case "pods":
		return n == corev1.ResourcePods || standardContainerResources.Has(s) || strings.HasPrefix(s, "requests.") && n != corev1.ResourceRequestsStorage ||
			strings.HasPrefix(s, "limits.") || strings.HasPrefix(s, corev1.ResourceHugePagesPrefix)
	case "services":
		return n == corev1.ResourceServices || n == corev1.ResourceServicesNodePorts || n == corev1.ResourceServicesLoadBalancers
	case "persistentvolumeclaims":
		return n == corev1.ResourcePersistentVolumeClaims || n == corev1.ResourceRequestsStorage || strings.HasSuffix(s, ".storageclass.storage.k8s.io/requests.storage") ||
			strings.HasSuffix(s, ".storageclass.storage.k8s.io/persistentvolumeclaims")
	}
	return legacyCountNames[res.Plural] == n
}

// QuotaUsage is what obj, an object of res, charges to a quota at now:
// its object count (count/<resource>, and the legacy name); for a pod
// not terminal (Succeeded, Failed, or past its deletion grace period),
// "pods" and its compute requests and limits (PodRequests/PodLimits,
// init containers included as Kubernetes' resource helpers count them);
// for a service its node ports and load balancer; for a claim its
// storage request (also per storage class).
func QuotaUsage(res store.Resource, obj store.Object, now time.Time) corev1.ResourceList {
	one := *resource.NewQuantity(1, resource.DecimalSI)
	out := corev1.ResourceList{QuotaCountName(res): one}
	if res.Group != "" {
		return out
	}
	if n, ok := legacyCountNames[res.Plural]; ok {
		out[n] = one
	}
	switch x := obj.(type) {
	case *corev1.Pod:
		if !QuotaPodActive(x, now) {
			return out
		}
		opts := resourcehelper.PodResourcesOptions{}
		return addResources(out, podComputeUsage(resourcehelper.PodRequests(x, opts), resourcehelper.PodLimits(x, opts)))
	case *corev1.Service:
		ports := 0
		if x.Spec.Type == corev1.ServiceTypeNodePort || x.Spec.Type == corev1.ServiceTypeLoadBalancer {
			for _, p := range x.Spec.Ports {
				if p.NodePort != 0 || x.Spec.Type == corev1.ServiceTypeNodePort || x.Spec.AllocateLoadBalancerNodePorts == nil || *x.Spec.AllocateLoadBalancerNodePorts {
					ports++
				}
			}
		}
		out[corev1.ResourceServicesNodePorts] = *resource.NewQuantity(int64(ports), resource.DecimalSI)
		lb := int64(0)
		if x.Spec.Type == corev1.ServiceTypeLoadBalancer {
			lb = 1
		}
		out[corev1.ResourceServicesLoadBalancers] = *resource.NewQuantity(lb, resource.DecimalSI)
	case *corev1.PersistentVolumeClaim:
		if q, ok := x.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
			out[corev1.ResourceRequestsStorage] = q
			if c := x.Spec.StorageClassName; c != nil && *c != "" {
				out[corev1.ResourceName(*c+".storageclass.storage.k8s.io/requests.storage")] = q
				out[corev1.ResourceName(*c+".storageclass.storage.k8s.io/persistentvolumeclaims")] = one
			}
		}
	}
	return out
}

// podComputeUsage is podComputeUsageHelper: pods=1, cpu/memory/
// ephemeral-storage requests under both their plain and requests. names,
// limits under limits., hugepages requests.
func podComputeUsage(requests, limits corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(1, resource.DecimalSI)}
	for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		if q, ok := requests[n]; ok {
			out[n] = q
			out[corev1.ResourceName("requests."+string(n))] = q
		}
		if q, ok := limits[n]; ok {
			out[corev1.ResourceName("limits."+string(n))] = q
		}
	}
	for n, q := range requests {
		if strings.HasPrefix(string(n), corev1.ResourceHugePagesPrefix) {
			out[n] = q
			out[corev1.ResourceName("requests."+string(n))] = q
		} else if isExtendedResourceName(n) {
			out[corev1.ResourceName("requests."+string(n))] = q
		}
	}
	return out
}

// QuotaPodActive is Kubernetes' QuotaV1Pod: a pod counts toward compute
// quota unless Succeeded or Failed, or deleted with its grace period over.
func QuotaPodActive(p *corev1.Pod, now time.Time) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if p.DeletionTimestamp != nil && p.DeletionGracePeriodSeconds != nil {
		if now.After(p.DeletionTimestamp.Add(time.Duration(*p.DeletionGracePeriodSeconds) * time.Second)) {
			return false
		}
	}
	return true
}

// QuotaMatchesScopes reports whether quota q applies to obj (of res):
// an unscoped quota applies to everything; a scoped one (spec.scopes,
// spec.scopeSelector) only to pods in every scope: Terminating
// (activeDeadlineSeconds >= 0), NotTerminating, BestEffort (QoS class),
// NotBestEffort, PriorityClass (In/NotIn/Exists/DoesNotExist on
// spec.priorityClassName). CrossNamespacePodAffinity never matches
// (orca's pods carry no namespaceSelector terms that are checked).
func QuotaMatchesScopes(q *corev1.ResourceQuota, obj store.Object) bool {
	reqs := make([]corev1.ScopedResourceSelectorRequirement, 0, len(q.Spec.Scopes))
	for _, sc := range q.Spec.Scopes {
		reqs = append(reqs, corev1.ScopedResourceSelectorRequirement{ScopeName: sc, Operator: corev1.ScopeSelectorOpExists})
	}
	if q.Spec.ScopeSelector != nil {
		reqs = append(reqs, q.Spec.ScopeSelector.MatchExpressions...)
	}
	if len(reqs) == 0 {
		return true
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return false
	}
	for _, r := range reqs {
		if !podMatchesScope(pod, r) {
			return false
		}
	}
	return true
}

func podMatchesScope(p *corev1.Pod, r corev1.ScopedResourceSelectorRequirement) bool {
	terminating := p.Spec.ActiveDeadlineSeconds != nil && *p.Spec.ActiveDeadlineSeconds >= 0
	bestEffort := podBestEffort(p)
	switch r.ScopeName {
	case corev1.ResourceQuotaScopeTerminating:
		return terminating
	case corev1.ResourceQuotaScopeNotTerminating:
		return !terminating
	case corev1.ResourceQuotaScopeBestEffort:
		return bestEffort
	case corev1.ResourceQuotaScopeNotBestEffort:
		return !bestEffort
	case corev1.ResourceQuotaScopePriorityClass:
		values := sets.New(r.Values...)
		switch r.Operator {
		case corev1.ScopeSelectorOpExists:
			return p.Spec.PriorityClassName != ""
		case corev1.ScopeSelectorOpDoesNotExist:
			return p.Spec.PriorityClassName == ""
		case corev1.ScopeSelectorOpIn:
			return values.Has(p.Spec.PriorityClassName)
		case corev1.ScopeSelectorOpNotIn:
			return !values.Has(p.Spec.PriorityClassName)
		}
	}
	return false
}

// quotaValidationSet are the resources every container must state when
// a quota limits them (the pod evaluator's Constraints).
var quotaValidationSet = sets.New[corev1.ResourceName](corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceRequestsCPU,
	corev1.ResourceRequestsMemory, corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory)

// QuotaPodConstraints is the pod evaluator's Constraints: when a quota
// limits cpu or memory (required), each container and init container
// must state it; the error is Kubernetes' "must specify limits.cpu for:
// web; requests.memory for: web,side".
func QuotaPodConstraints(required []corev1.ResourceName, p *corev1.Pod) []string {
	req := sets.New(required...).Intersection(quotaValidationSet)
	missing := map[corev1.ResourceName]sets.Set[string]{}
	check := func(c *corev1.Container) {
		have := sets.KeySet(podComputeUsage(c.Resources.Requests, c.Resources.Limits))
		for _, n := range sets.List(req.Difference(have)) {
			if missing[n] == nil {
				missing[n] = sets.New[string]()
			}
			missing[n].Insert(c.Name)
		}
	}
	for i := range p.Spec.Containers {
		check(&p.Spec.Containers[i])
	}
	for i := range p.Spec.InitContainers {
		check(&p.Spec.InitContainers[i])
	}
	var msgs []string
	for _, n := range sets.List(sets.KeySet(missing)) {
		msgs = append(msgs, string(n)+" for: "+strings.Join(sets.List(missing[n]), ","))
	}
	return msgs
}

// podBestEffort is GetPodQOS(p) == BestEffort: no container states a cpu
// or memory request or limit.
func podBestEffort(p *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for _, c := range cs {
			for _, l := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
					if q, ok := l[n]; ok && !q.IsZero() {
						return false
					}
				}
			}
		}
	}
	return true
}

// addResources returns a+b (quota.Add).
func addResources(a, b corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for k, v := range a {
		out[k] = v.DeepCopy()
	}
	for k, v := range b {
		q := out[k]
		q.Add(v)
		out[k] = q
	}
	return out
}

// CalculateQuotaUsed is q's status.used from the objects stored in its
// namespace at now (Kubernetes' quota.CalculateUsage): every resource of
// spec.hard, zero when nothing is charged, the sum of QuotaUsage over the
// objects of each served namespaced kind charging it that match q's scopes.
func CalculateQuotaUsed(ctx context.Context, reg *registry.Registry, st *store.Store, q *corev1.ResourceQuota, now time.Time) (corev1.ResourceList, error) {
	used := corev1.ResourceList{}
	for k := range q.Spec.Hard {
		used[k] = resource.Quantity{Format: q.Spec.Hard[k].Format}
	}
	seen := sets.New[string]()
	for _, k := range reg.All() {
		res := k.Resource
		if !res.Namespaced || k.Virtual || res.Projection || seen.Has(res.Group+"/"+res.Plural) {
			continue
		}
		seen.Insert(res.Group + "/" + res.Plural)
		var names []corev1.ResourceName
		for n := range q.Spec.Hard {
			if QuotaMatchesResource(res, n) {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			continue
		}
		objs, _, err := st.List(ctx, res, q.Namespace)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if !QuotaMatchesScopes(q, o) {
				continue
			}
			u := QuotaUsage(res, o, now)
			for _, n := range names {
				if v, ok := u[n]; ok {
					t := used[n]
					t.Add(v)
					used[n] = t
				}
			}
		}
	}
	return used, nil
}
