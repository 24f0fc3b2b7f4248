package apiserver

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

// Admission plugin names in the registry's chains.
const (
	limitRangerAdmissionName   = "LimitRanger"
	resourceQuotaAdmissionName = "ResourceQuota"
	// limitRangerAnnotation records the defaults LimitRanger set.
	limitRangerAnnotation = "kubernetes.io/limit-ranger"
)

// installQuotaAdmission installs Kubernetes' LimitRanger (mutating:
// defaults; validating: min, max, maxLimitRequestRatio) and ResourceQuota
// (validating, last) admission plugins in the registry, so the pods
// controllers create are limited as those created through the API.
func (s *Server) installQuotaAdmission() {
	s.reg.SetMutatingAdmission(limitRangerAdmissionName, func(ctx context.Context, a registry.AdmissionAttributes) error {
		pod, ok := a.Object.(*corev1.Pod)
		if !ok || a.Operation != admissionv1.Create || a.Subresource != "" {
			return nil
		}
		ranges, err := s.limitRanges(ctx, pod.Namespace)
		if err != nil {
			return err
		}
		for _, lr := range ranges {
			defaultPodResources(lr, pod)
		}
		return nil
	})
	s.reg.SetValidatingAdmission(limitRangerAdmissionName, s.admitLimitRange)
	s.reg.SetValidatingAdmission(resourceQuotaAdmissionName, s.admitResourceQuota)
}

func (s *Server) limitRanges(ctx context.Context, ns string) ([]*corev1.LimitRange, error) {
	objs, _, err := s.st.List(ctx, core.LimitRanges, ns)
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.LimitRange, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.LimitRange))
	}
	return out, nil
}

// defaultPodResources is LimitRanger's PodMutateLimitFunc: each container
// (and init container) gets the Container item's default limits and
// defaultRequests it does not state, and the pod the annotation
// kubernetes.io/limit-ranger "LimitRanger plugin set: cpu, memory request
// for container web; cpu limit for container web".
func defaultPodResources(lr *corev1.LimitRange, pod *corev1.Pod) {
	def := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for _, it := range lr.Spec.Limits {
		if it.Type == corev1.LimitTypeContainer {
			for k, v := range it.DefaultRequest {
				def.Requests[k] = v.DeepCopy()
			}
			for k, v := range it.Default {
				def.Limits[k] = v.DeepCopy()
			}
		}
	}
	if len(def.Requests) == 0 && len(def.Limits) == 0 {
		return
	}
	var notes []string
	merge := func(c *corev1.Container, kind string) {
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{}
		}
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		var setReq, setLim []string
		for k, v := range def.Limits {
			if _, ok := c.Resources.Limits[k]; !ok {
				c.Resources.Limits[k] = v.DeepCopy()
				setLim = append(setLim, string(k))
			}
		}
		for k, v := range def.Requests {
			if _, ok := c.Resources.Requests[k]; !ok {
				c.Resources.Requests[k] = v.DeepCopy()
				setReq = append(setReq, string(k))
			}
		}
		sort.Strings(setReq)
		sort.Strings(setLim)
		if len(setReq) > 0 {
			notes = append(notes, fmt.Sprintf("%s request for %s %s", strings.Join(setReq, ", "), kind, c.Name))
		}
		if len(setLim) > 0 {
			notes = append(notes, fmt.Sprintf("%s limit for %s %s", strings.Join(setLim, ", "), kind, c.Name))
		}
	}
	for i := range pod.Spec.Containers {
		merge(&pod.Spec.Containers[i], "container")
	}
	for i := range pod.Spec.InitContainers {
		merge(&pod.Spec.InitContainers[i], "init container")
	}
	if len(notes) > 0 {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[limitRangerAnnotation] = "LimitRanger plugin set: " + strings.Join(notes, "; ")
	}
}

// admitLimitRange is LimitRanger's validation: a pod created, a claim
// created or updated, checked against each LimitRange of its namespace
// (PodValidateLimitFunc, PersistentVolumeClaimValidateLimitFunc); the
// first range refusing it makes a 403 with Kubernetes' messages
// ("maximum cpu usage per Container is 500m, but limit is 1").
func (s *Server) admitLimitRange(ctx context.Context, a registry.AdmissionAttributes) error {
	if a.Subresource != "" {
		return nil
	}
	var check func(lr *corev1.LimitRange) error
	switch x := a.Object.(type) {
	case *corev1.Pod:
		if a.Operation != admissionv1.Create {
			return nil
		}
		check = func(lr *corev1.LimitRange) error { return validatePodLimits(lr, x) }
	case *corev1.PersistentVolumeClaim:
		check = func(lr *corev1.LimitRange) error { return validateClaimLimits(lr, x) }
	default:
		return nil
	}
	ranges, err := s.limitRanges(ctx, a.Object.GetNamespace())
	if err != nil {
		return err
	}
	for _, lr := range ranges {
		if err := check(lr); err != nil {
			return apierrors.NewForbidden(a.Resource.GroupResource(), a.Object.GetName(), err)
		}
	}
	return nil
}

func validatePodLimits(lr *corev1.LimitRange, pod *corev1.Pod) error {
	var errs []error
	each := func(typ string, it corev1.LimitRangeItem, req, lim corev1.ResourceList) {
		for _, k := range sortedNames(it.Min) {
			if err := minConstraint(typ, string(k), it.Min[k], req, lim); err != nil {
				errs = append(errs, err)
			}
		}
		for _, k := range sortedNames(it.Max) {
			if err := maxConstraint(typ, string(k), it.Max[k], req, lim); err != nil {
				errs = append(errs, err)
			}
		}
		for _, k := range sortedNames(it.MaxLimitRequestRatio) {
			if err := limitRequestRatioConstraint(typ, string(k), it.MaxLimitRequestRatio[k], req, lim); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, it := range lr.Spec.Limits {
		switch it.Type {
		case corev1.LimitTypeContainer:
			for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
				for _, c := range cs {
					each(string(it.Type), it, c.Resources.Requests, c.Resources.Limits)
				}
			}
		case corev1.LimitTypePod:
			each(string(it.Type), it, podResources(pod, func(c *corev1.Container) corev1.ResourceList { return c.Resources.Requests }),
				podResources(pod, func(c *corev1.Container) corev1.ResourceList { return c.Resources.Limits }))
		}
	}
	return utilerrors.NewAggregate(errs)
}

// podResources is LimitRanger's podRequests/podLimits: the sum over
// containers, each resource at least the largest init container's; a
// resource only when some container states it.
func podResources(pod *corev1.Pod, get func(*corev1.Container) corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := range pod.Spec.Containers {
		for k, v := range get(&pod.Spec.Containers[i]) {
			q := out[k]
			q.Add(v)
			out[k] = q
		}
	}
	for i := range pod.Spec.InitContainers {
		for k, v := range get(&pod.Spec.InitContainers[i]) {
			if q, ok := out[k]; !ok || v.Cmp(q) > 0 {
				out[k] = v.DeepCopy()
			}
		}
	}
	return out
}

func validateClaimLimits(lr *corev1.LimitRange, pvc *corev1.PersistentVolumeClaim) error {
	var errs []error
	for _, it := range lr.Spec.Limits {
		if it.Type != corev1.LimitTypePersistentVolumeClaim {
			continue
		}
		for _, k := range sortedNames(it.Min) {
			if err := minConstraint(string(it.Type), string(k), it.Min[k], pvc.Spec.Resources.Requests, corev1.ResourceList{}); err != nil {
				errs = append(errs, err)
			}
		}
		for _, k := range sortedNames(it.Max) {
			if err := maxRequestConstraint(string(it.Type), string(k), it.Max[k], pvc.Spec.Resources.Requests); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return utilerrors.NewAggregate(errs)
}

func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	out := make([]corev1.ResourceName, 0, len(l))
	for k := range l {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// requestLimitEnforcedValues compares in milli-units when none overflows.
func requestLimitEnforcedValues(req, lim, enf resource.Quantity) (int64, int64, int64) {
	r, l, e := req.Value(), lim.Value(), enf.Value()
	if r <= resource.MaxMilliValue && l <= resource.MaxMilliValue && e <= resource.MaxMilliValue {
		return req.MilliValue(), lim.MilliValue(), enf.MilliValue()
	}
	return r, l, e
}

// minConstraint, maxConstraint, maxRequestConstraint and
// limitRequestRatioConstraint are LimitRanger's, with its messages.
func minConstraint(typ, name string, enforced resource.Quantity, request, limit corev1.ResourceList) error {
	req, reqOK := request[corev1.ResourceName(name)]
	lim, limOK := limit[corev1.ResourceName(name)]
	r, l, e := requestLimitEnforcedValues(req, lim, enforced)
	if !reqOK {
		return fmt.Errorf("minimum %s usage per %s is %s.  No request is specified", name, typ, enforced.String())
	}
	if r < e {
		return fmt.Errorf("minimum %s usage per %s is %s, but request is %s", name, typ, enforced.String(), req.String())
	}
	if limOK && l < e {
		return fmt.Errorf("minimum %s usage per %s is %s, but limit is %s", name, typ, enforced.String(), lim.String())
	}
	return nil
}

func maxRequestConstraint(typ, name string, enforced resource.Quantity, request corev1.ResourceList) error {
	req, reqOK := request[corev1.ResourceName(name)]
	r, _, e := requestLimitEnforcedValues(req, resource.Quantity{}, enforced)
	if !reqOK {
		return fmt.Errorf("maximum %s usage per %s is %s.  No request is specified", name, typ, enforced.String())
	}
	if r > e {
		return fmt.Errorf("maximum %s usage per %s is %s, but request is %s", name, typ, enforced.String(), req.String())
	}
	return nil
}

func maxConstraint(typ, name string, enforced resource.Quantity, request, limit corev1.ResourceList) error {
	req, reqOK := request[corev1.ResourceName(name)]
	lim, limOK := limit[corev1.ResourceName(name)]
	r, l, e := requestLimitEnforcedValues(req, lim, enforced)
	if !limOK {
		return fmt.Errorf("maximum %s usage per %s is %s.  No limit is specified", name, typ, enforced.String())
	}
	if l > e {
		return fmt.Errorf("maximum %s usage per %s is %s, but limit is %s", name, typ, enforced.String(), lim.String())
	}
	if reqOK && r > e {
		return fmt.Errorf("maximum %s usage per %s is %s, but request is %s", name, typ, enforced.String(), req.String())
	}
	return nil
}

func limitRequestRatioConstraint(typ, name string, enforced resource.Quantity, request, limit corev1.ResourceList) error {
	req, reqOK := request[corev1.ResourceName(name)]
	lim, limOK := limit[corev1.ResourceName(name)]
	r, l, _ := requestLimitEnforcedValues(req, lim, enforced)
	if !reqOK || r == 0 {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but no request is specified or request is 0", name, typ, enforced.String())
	}
	if !limOK || l == 0 {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but no limit is specified or limit is 0", name, typ, enforced.String())
	}
	observed := float64(l) / float64(r)
	display := observed
	maxRatio := float64(enforced.Value())
	if enforced.Value() <= resource.MaxMilliValue {
		observed *= 1000
		maxRatio = float64(enforced.MilliValue())
	}
	if observed > maxRatio {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but provided ratio is %f", name, typ, enforced.String(), display)
	}
	return nil
}

// admitResourceQuota is Kubernetes' ResourceQuota admission
// (k8s.io/apiserver/pkg/admission/plugin/resourcequota) for creates: for
// each quota of the namespace that the object matches (its resources,
// its scopes), a pod must state what the quota limits ("failed quota: q:
// must specify limits.cpu for: web"), and the object's usage is charged
// to status.used with a guaranteed update of the quota (compare-and-swap
// on its revision, re-evaluated on conflict), so parallel creates never
// both take the last unit; over the hard limit the create is refused with
// 403 "exceeded quota: q, requested: pods=1, used: pods=2, limited:
// pods=2". A quota whose status is not yet calculated is calculated here
// first (as the quota controller would). When a later quota refuses, the
// charges already made are given back. Updates are not charged (orca's
// pods cannot be resized); what a refused or failed write leaves charged
// the quota controller's recalculation releases.
func (s *Server) admitResourceQuota(ctx context.Context, a registry.AdmissionAttributes) error {
	if a.Operation != admissionv1.Create || a.Subresource != "" || !a.Resource.Namespaced {
		return nil
	}
	ns := a.Object.GetNamespace()
	objs, _, err := s.st.List(ctx, core.ResourceQuotas, ns)
	if err != nil || len(objs) == 0 {
		return err
	}
	now := time.Now()
	usage := core.QuotaUsage(a.Resource, a.Object, now)
	type charge struct {
		name  string
		delta corev1.ResourceList
	}
	var charged []charge
	refund := func() {
		for _, c := range charged {
			_, _ = s.reg.GuaranteedUpdateStatus(context.WithoutCancel(ctx), s.st, core.ResourceQuotas, ns, c.name, nil, func(cur store.Object) (store.Object, error) {
				q := cur.(*corev1.ResourceQuota)
				for k, v := range c.delta {
					u := q.Status.Used[k]
					u.Sub(v)
					if u.Sign() < 0 {
						u = resource.Quantity{}
					}
					q.Status.Used[k] = u
				}
				return q, nil
			})
		}
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].GetName() < objs[j].GetName() })
	for _, o := range objs {
		q := o.(*corev1.ResourceQuota)
		if !core.QuotaMatchesScopes(q, a.Object) {
			continue
		}
		var names []corev1.ResourceName
		for k := range q.Spec.Hard {
			if core.QuotaMatchesResource(a.Resource, k) {
				names = append(names, k)
			}
		}
		if len(names) == 0 {
			continue
		}
		if pod, ok := a.Object.(*corev1.Pod); ok {
			if msgs := core.QuotaPodConstraints(names, pod); len(msgs) > 0 {
				refund()
				return apierrors.NewForbidden(a.Resource.GroupResource(), a.Object.GetName(),
					fmt.Errorf("failed quota: %s: must specify %s", q.Name, strings.Join(msgs, "; ")))
			}
		}
		delta := corev1.ResourceList{}
		for _, k := range names {
			if v, ok := usage[k]; ok && !v.IsZero() {
				delta[k] = v
			}
		}
		if len(delta) == 0 {
			continue
		}
		_, err := s.reg.GuaranteedUpdateStatus(ctx, s.st, core.ResourceQuotas, ns, q.Name, nil, func(cur store.Object) (store.Object, error) {
			q := cur.(*corev1.ResourceQuota)
			if !statusCovers(q) {
				used, err := s.QuotaUsed(ctx, q)
				if err != nil {
					return nil, err
				}
				q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.DeepCopy().Hard, Used: used}
			}
			if q.Status.Used == nil {
				q.Status.Used = corev1.ResourceList{}
			}
			var over []corev1.ResourceName
			for k, d := range delta {
				hard, ok := q.Spec.Hard[k]
				if !ok {
					continue
				}
				n := q.Status.Used[k].DeepCopy()
				n.Add(d)
				if n.Cmp(hard) > 0 {
					over = append(over, k)
				}
			}
			if len(over) > 0 {
				sort.Slice(over, func(i, j int) bool { return over[i] < over[j] })
				return nil, apierrors.NewForbidden(a.Resource.GroupResource(), a.Object.GetName(),
					fmt.Errorf("exceeded quota: %s, requested: %s, used: %s, limited: %s", q.Name,
						prettyQuota(over, delta), prettyQuota(over, q.Status.Used), prettyQuota(over, q.Spec.Hard)))
			}
			for k, d := range delta {
				n := q.Status.Used[k].DeepCopy()
				n.Add(d)
				q.Status.Used[k] = n
			}
			return q, nil
		})
		if apierrors.IsNotFound(err) {
			continue // the quota was deleted meanwhile
		}
		if err != nil {
			refund()
			return err
		}
		charged = append(charged, charge{q.Name, delta})
	}
	return nil
}

// statusCovers reports whether q's status was calculated for its spec.
func statusCovers(q *corev1.ResourceQuota) bool {
	if len(q.Status.Hard) != len(q.Spec.Hard) {
		return false
	}
	for k, v := range q.Spec.Hard {
		if h, ok := q.Status.Hard[k]; !ok || h.Cmp(v) != 0 {
			return false
		}
		if _, ok := q.Status.Used[k]; !ok {
			return false
		}
	}
	return true
}

// prettyQuota is the plugin's prettyPrint of names of l: "pods=1,cpu=2".
func prettyQuota(names []corev1.ResourceName, l corev1.ResourceList) string {
	parts := make([]string, 0, len(names))
	for _, k := range names {
		v := l[k]
		parts = append(parts, string(k)+"="+v.String())
	}
	return strings.Join(parts, ",")
}

// QuotaUsed calculates q's status.used from the objects stored in its
// namespace: for each resource of spec.hard, the sum of QuotaUsage over
// the objects of each kind it is charged by that match q's scopes.
func (s *Server) QuotaUsed(ctx context.Context, q *corev1.ResourceQuota) (corev1.ResourceList, error) {
	return core.CalculateQuotaUsed(ctx, s.reg, s.st, q, time.Now())
}
