// Package podsecurity is Kubernetes' Pod Security admission (the Pod
// Security Standards privileged, baseline and restricted, chosen per
// namespace with the labels pod-security.kubernetes.io/enforce, audit and
// warn and their -version labels), over the checks of
// k8s.io/pod-security-admission/policy. The decision logic is ported from
// k8s.io/pod-security-admission/admission (admission.go), whose package
// links client-go's whole typed clientset (13 MB of orca-server) for two
// helper constructors; messages and behaviour are the same:
//
//   - pods (create, update of a container image, the ephemeralcontainers
//     subresource) are checked against enforce (a 403 `pods "x" is
//     forbidden: violates PodSecurity "restricted:latest": ...`), audit
//     (an audit annotation) and warn (a Warning header);
//   - objects with a pod template (Deployment, ReplicaSet, StatefulSet,
//     DaemonSet, Job, CronJob, ReplicationController, PodTemplate) only
//     get audit annotations and warnings, never a rejection;
//   - namespaces: invalid pod-security labels are a 422 on create and on
//     an update that changes them; tightening enforce warns about each
//     existing pod that would violate it (at most 3,000 pods, 1 s);
//   - exemptions by username, namespace and runtimeClassName, from the
//     PodSecurityConfiguration.
//
// One addition: pods whose RuntimeClass has a sandboxed handler ("wasm":
// WebAssembly on wazero) are evaluated without their Linux security
// settings (securityContext of the pod and containers: privileged,
// capabilities, runAsUser/runAsNonRoot, seccomp, AppArmor, SELinux,
// procMount, sysctls), which such a pod does not have; the WASM sandbox
// runs no process of its own. So a WASM pod needs no privilege and no
// securityContext in a restricted namespace, while what it can still reach
// on the node (hostPath volumes, host namespaces, host ports, probes on
// other hosts) is checked as for any pod. A blanket runtimeClasses
// exemption would let a restricted namespace mount the node's / into a
// WASM pod.
package podsecurity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	psaapi "k8s.io/pod-security-admission/admission/api"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// SandboxedHandler is the RuntimeClass handler whose pods are evaluated
// without Linux security settings (see the package comment).
const SandboxedHandler = "wasm"

// AnnotationPrefix prefixes the audit annotations' keys, as kube-apiserver
// writes them ("pod-security.kubernetes.io/enforce-policy",
// ".../audit-violations", ".../exempt").
const AnnotationPrefix = "pod-security.kubernetes.io/"

// Limits of the check of existing pods when a namespace's enforce level
// tightens, as Kubernetes'.
const (
	NamespaceMaxPodsToCheck  = 3000
	NamespacePodCheckTimeout = time.Second
)

// Config configures New.
type Config struct {
	// Configuration is the PodSecurityConfiguration (defaults and
	// exemptions). Default: DefaultConfiguration() (privileged).
	Configuration *psaapi.PodSecurityConfiguration
	// Namespace returns a namespace by name (its labels choose the
	// policy). Required.
	Namespace func(ctx context.Context, name string) (*corev1.Namespace, error)
	// Pods lists the pods of a namespace (the check of existing pods when
	// enforce tightens). Required.
	Pods func(ctx context.Context, namespace string) ([]*corev1.Pod, error)
	// RuntimeClassHandler returns the handler of a RuntimeClass, false
	// when there is none of that name. Nil: no pod is sandboxed.
	RuntimeClassHandler func(ctx context.Context, name string) (string, bool)
}

// Admission evaluates requests. It is safe for concurrent use.
type Admission struct {
	cfg           Config
	conf          *psaapi.PodSecurityConfiguration
	evaluator     policy.Evaluator
	defaultPolicy api.Policy
}

// New returns the admission for cfg; it fails on an invalid
// configuration or a missing getter.
func New(cfg Config) (*Admission, error) {
	if cfg.Namespace == nil || cfg.Pods == nil {
		return nil, errors.New("podsecurity: Namespace and Pods are required")
	}
	conf := cfg.Configuration
	if conf == nil {
		conf = DefaultConfiguration()
	}
	def, err := psaapi.ToPolicy(conf.Defaults)
	if err != nil {
		return nil, fmt.Errorf("podsecurity: defaults: %w", err)
	}
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return nil, fmt.Errorf("podsecurity: %w", err)
	}
	return &Admission{cfg: cfg, conf: conf, evaluator: ev, defaultPolicy: def}, nil
}

// Result is the decision on one request.
type Result struct {
	// Err rejects the request: a 403 Forbidden with Kubernetes' message
	// ("violates PodSecurity ..."), a 422 for invalid namespace labels, a
	// 500 when the namespace cannot be read, a 400 for an object of the
	// wrong type. Nil admits it.
	Err error
	// Warnings go to the client as Warning headers.
	Warnings []string
	// AuditAnnotations go to the request's audit event, keys without
	// AnnotationPrefix.
	AuditAnnotations map[string]string
}

// Handles reports whether the admission looks at requests on gr: pods,
// namespaces and the kinds with a pod template.
func Handles(gr schema.GroupResource) bool {
	return gr == namespacesResource || podSpecResources[gr]
}

var (
	namespacesResource = corev1.Resource("namespaces")
	podsResource       = corev1.Resource("pods")
	podSpecResources   = map[schema.GroupResource]bool{
		corev1.Resource("pods"):                   true,
		corev1.Resource("replicationcontrollers"): true,
		corev1.Resource("podtemplates"):           true,
		appsv1.Resource("replicasets"):            true,
		appsv1.Resource("deployments"):            true,
		appsv1.Resource("statefulsets"):           true,
		appsv1.Resource("daemonsets"):             true,
		batchv1.Resource("jobs"):                  true,
		batchv1.Resource("cronjobs"):              true,
	}
)

// Validate admits or rejects a create or update (other operations and
// resources it does not handle are admitted). Objects are the external v1
// types.
func (a *Admission) Validate(ctx context.Context, attrs api.Attributes) Result {
	if op := attrs.GetOperation(); op != admissionv1.Create && op != admissionv1.Update {
		return Result{}
	}
	switch gr := attrs.GetResource().GroupResource(); {
	case gr == namespacesResource:
		return a.validateNamespace(ctx, attrs)
	case gr == podsResource:
		return a.validatePod(ctx, attrs)
	case podSpecResources[gr]:
		return a.validatePodController(ctx, attrs)
	}
	return Result{}
}

func exempt(reason string) Result {
	return Result{AuditAnnotations: map[string]string{api.ExemptionReasonAnnotationKey: reason}}
}

func (a *Admission) validateNamespace(ctx context.Context, attrs api.Attributes) Result {
	if attrs.GetSubresource() != "" {
		return Result{}
	}
	obj, err := attrs.GetObject()
	if err != nil {
		return Result{Err: apierrors.NewBadRequest("failed to decode namespace")}
	}
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return Result{Err: apierrors.NewBadRequest("failed to decode namespace")}
	}
	newPolicy, newErrs := api.PolicyToEvaluate(ns.Labels, a.defaultPolicy)
	invalid := func() Result {
		return Result{Err: apierrors.NewInvalid(attrs.GetKind().GroupKind(), attrs.GetName(), newErrs)}
	}
	exemptWarning := func() Result {
		if w := a.exemptNamespaceWarning(ns.Name, newPolicy, ns.Labels); w != "" {
			return Result{Warnings: []string{w}}
		}
		return Result{}
	}
	if attrs.GetOperation() == admissionv1.Create {
		if len(newErrs) > 0 {
			return invalid()
		}
		if a.exemptNamespace(attrs.GetNamespace()) {
			return exemptWarning()
		}
		return Result{}
	}
	oldObj, err := attrs.GetOldObject()
	if err != nil {
		return Result{Err: apierrors.NewBadRequest("failed to decode old namespace")}
	}
	oldNS, ok := oldObj.(*corev1.Namespace)
	if !ok {
		return Result{Err: apierrors.NewBadRequest("failed to decode old namespace")}
	}
	oldPolicy, oldErrs := api.PolicyToEvaluate(oldNS.Labels, a.defaultPolicy)
	if len(newErrs) > 0 && (len(oldErrs) == 0 || !reflect.DeepEqual(newErrs, oldErrs)) {
		return invalid()
	}
	switch {
	case newPolicy.Enforce == oldPolicy.Enforce,
		newPolicy.Enforce.Level == api.LevelPrivileged,
		newPolicy.Enforce.Version == oldPolicy.Enforce.Version && api.CompareLevels(newPolicy.Enforce.Level, oldPolicy.Enforce.Level) < 1:
		return Result{}
	}
	if a.exemptNamespace(attrs.GetNamespace()) {
		return exemptWarning()
	}
	return Result{Warnings: a.evaluatePodsInNamespace(ctx, ns.Name, newPolicy.Enforce)}
}

// ignoredPodSubresources are the pod subresources that cannot change what
// the policy checks.
var ignoredPodSubresources = map[string]bool{
	"exec": true, "attach": true, "binding": true, "eviction": true, "log": true,
	"portforward": true, "proxy": true, "status": true,
}

func (a *Admission) validatePod(ctx context.Context, attrs api.Attributes) Result {
	if ignoredPodSubresources[attrs.GetSubresource()] {
		return Result{}
	}
	if a.exemptNamespace(attrs.GetNamespace()) {
		return exempt("namespace")
	}
	if a.exemptUser(attrs.GetUserName()) {
		return exempt("user")
	}
	ns, err := a.cfg.Namespace(ctx, attrs.GetNamespace())
	if err != nil {
		slog.Error("pod security: failed to fetch the pod's namespace", "namespace", attrs.GetNamespace(), "err", err)
		return Result{Err: apierrors.NewInternalError(fmt.Errorf("failed to lookup namespace %q", attrs.GetNamespace())),
			AuditAnnotations: map[string]string{"error": fmt.Sprintf("failed to lookup namespace %q: %v", attrs.GetNamespace(), err)}}
	}
	nsPolicy, nsPolicyErrs := api.PolicyToEvaluate(ns.Labels, a.defaultPolicy)
	if len(nsPolicyErrs) == 0 && nsPolicy.FullyPrivileged() {
		return Result{AuditAnnotations: map[string]string{
			api.EnforcedPolicyAnnotationKey: api.LevelVersion{Level: api.LevelPrivileged, Version: api.LatestVersion()}.String()}}
	}
	obj, err := attrs.GetObject()
	if err != nil {
		return Result{Err: apierrors.NewBadRequest("failed to decode object")}
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return Result{Err: apierrors.NewBadRequest("failed to decode pod")}
	}
	if attrs.GetOperation() == admissionv1.Update {
		oldObj, err := attrs.GetOldObject()
		if err != nil {
			return Result{Err: apierrors.NewBadRequest("failed to decode old object")}
		}
		oldPod, ok := oldObj.(*corev1.Pod)
		if !ok {
			return Result{Err: apierrors.NewBadRequest("failed to decode old pod")}
		}
		if !isSignificantPodUpdate(pod, oldPod) {
			return Result{}
		}
	}
	return a.evaluatePod(ctx, nsPolicy, nsPolicyErrs.ToAggregate(), &pod.ObjectMeta, &pod.Spec, attrs, true)
}

func (a *Admission) validatePodController(ctx context.Context, attrs api.Attributes) Result {
	if attrs.GetSubresource() != "" {
		return Result{}
	}
	if a.exemptNamespace(attrs.GetNamespace()) {
		return exempt("namespace")
	}
	if a.exemptUser(attrs.GetUserName()) {
		return exempt("user")
	}
	ns, err := a.cfg.Namespace(ctx, attrs.GetNamespace())
	if err != nil {
		return Result{AuditAnnotations: map[string]string{"error": fmt.Sprintf("failed to lookup namespace %q: %v", attrs.GetNamespace(), err)}}
	}
	nsPolicy, nsPolicyErrs := api.PolicyToEvaluate(ns.Labels, a.defaultPolicy)
	if len(nsPolicyErrs) == 0 && nsPolicy.Warn.Level == api.LevelPrivileged && nsPolicy.Audit.Level == api.LevelPrivileged {
		return Result{}
	}
	obj, err := attrs.GetObject()
	if err != nil {
		return Result{AuditAnnotations: map[string]string{"error": fmt.Sprintf("failed to decode object: %v", err)}}
	}
	meta, spec := podTemplate(obj)
	if meta == nil && spec == nil {
		return Result{}
	}
	return a.evaluatePod(ctx, nsPolicy, nsPolicyErrs.ToAggregate(), meta, spec, attrs, false)
}

// podTemplate returns the pod metadata and spec an object carries, nils
// when it has none, as the library's DefaultPodSpecExtractor.
func podTemplate(obj any) (*metav1.ObjectMeta, *corev1.PodSpec) {
	tmpl := func(t *corev1.PodTemplateSpec) (*metav1.ObjectMeta, *corev1.PodSpec) {
		if t == nil {
			return nil, nil
		}
		return &t.ObjectMeta, &t.Spec
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		return &o.ObjectMeta, &o.Spec
	case *corev1.PodTemplate:
		return tmpl(&o.Template)
	case *corev1.ReplicationController:
		return tmpl(o.Spec.Template)
	case *appsv1.ReplicaSet:
		return tmpl(&o.Spec.Template)
	case *appsv1.Deployment:
		return tmpl(&o.Spec.Template)
	case *appsv1.DaemonSet:
		return tmpl(&o.Spec.Template)
	case *appsv1.StatefulSet:
		return tmpl(&o.Spec.Template)
	case *batchv1.Job:
		return tmpl(&o.Spec.Template)
	case *batchv1.CronJob:
		return tmpl(&o.Spec.JobTemplate.Spec.Template)
	}
	return nil, nil
}

// evaluatePod checks a pod(-like) spec against the namespace's policy;
// enforce only when enforce is set (pods, not templates).
func (a *Admission) evaluatePod(ctx context.Context, nsPolicy api.Policy, nsPolicyErr error, meta *metav1.ObjectMeta, spec *corev1.PodSpec, attrs api.Attributes, enforce bool) Result {
	if a.exemptRuntimeClass(spec.RuntimeClassName) {
		return exempt("runtimeClass")
	}
	spec = a.asEvaluated(ctx, spec)
	res := Result{AuditAnnotations: map[string]string{}}
	if nsPolicyErr != nil {
		res.AuditAnnotations["error"] = fmt.Sprintf("Failed to parse policy: %v", nsPolicyErr)
	}
	cached := map[api.LevelVersion]policy.AggregateCheckResult{}
	eval := func(lv api.LevelVersion) policy.AggregateCheckResult {
		r, ok := cached[lv]
		if !ok {
			r = policy.AggregateCheckResults(a.evaluator.EvaluatePod(lv, meta, spec))
			cached[lv] = r
		}
		return r
	}
	if enforce {
		res.AuditAnnotations[api.EnforcedPolicyAnnotationKey] = nsPolicy.Enforce.String()
		if r := eval(nsPolicy.Enforce); !r.Allowed {
			res.Err = apierrors.NewForbidden(attrs.GetResource().GroupResource(), attrs.GetName(),
				fmt.Errorf("violates PodSecurity %q: %s", nsPolicy.Enforce.String(), r.ForbiddenDetail()))
		}
	}
	if r := eval(nsPolicy.Audit); !r.Allowed {
		res.AuditAnnotations[api.AuditViolationsAnnotationKey] = fmt.Sprintf("would violate PodSecurity %q: %s", nsPolicy.Audit.String(), r.ForbiddenDetail())
	}
	if res.Err == nil { // no warnings on a request rejected anyway
		if r := eval(nsPolicy.Warn); !r.Allowed {
			res.Warnings = append(res.Warnings, fmt.Sprintf("would violate PodSecurity %q: %s", nsPolicy.Warn.String(), r.ForbiddenDetail()))
		}
	}
	return res
}

// asEvaluated returns spec as the checks should see it: for a pod of a
// sandboxed RuntimeClass, a copy without Linux security settings (see the
// package comment); else spec itself.
func (a *Admission) asEvaluated(ctx context.Context, spec *corev1.PodSpec) *corev1.PodSpec {
	if a.cfg.RuntimeClassHandler == nil || spec.RuntimeClassName == nil || *spec.RuntimeClassName == "" {
		return spec
	}
	if h, ok := a.cfg.RuntimeClassHandler(ctx, *spec.RuntimeClassName); !ok || h != SandboxedHandler {
		return spec
	}
	return Sandboxed(spec)
}

// Sandboxed returns a copy of spec with the settings a WASM sandbox does
// not have replaced by the restricted profile's values: the pod's and
// every container's securityContext become runAsNonRoot, seccomp
// RuntimeDefault, no privilege escalation, all capabilities dropped, and
// no privileged, runAsUser, SELinux, AppArmor, procMount, sysctls or
// Windows options. Volumes, host namespaces, ports and probes stay.
func Sandboxed(spec *corev1.PodSpec) *corev1.PodSpec {
	out := spec.DeepCopy()
	yes, no := true, false
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	out.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &yes, SeccompProfile: seccomp}
	sc := func() *corev1.SecurityContext {
		return &corev1.SecurityContext{Privileged: &no, AllowPrivilegeEscalation: &no, RunAsNonRoot: &yes,
			SeccompProfile: seccomp, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	}
	for i := range out.InitContainers {
		out.InitContainers[i].SecurityContext = sc()
	}
	for i := range out.Containers {
		out.Containers[i].SecurityContext = sc()
	}
	for i := range out.EphemeralContainers {
		out.EphemeralContainers[i].SecurityContext = sc()
	}
	return out
}

// evaluatePodsInNamespace warns about the existing pods of namespace that
// violate enforce, one warning per distinct violation, as Kubernetes'
// EvaluatePodsInNamespace.
func (a *Admission) evaluatePodsInNamespace(ctx context.Context, namespace string, enforce api.LevelVersion) []string {
	timeout := NamespacePodCheckTimeout
	if deadline, ok := ctx.Deadline(); ok {
		if half := time.Until(deadline) / 2; timeout > half {
			timeout = half
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pods, err := a.cfg.Pods(ctx, namespace)
	if err != nil {
		slog.Error("pod security: failed to list pods", "namespace", namespace, "err", err)
		return []string{"failed to list pods while checking new PodSecurity enforce level"}
	}
	type count struct {
		name string
		n    int
	}
	var warnings, podWarnings []string
	counts := map[string]count{}
	pods = a.prioritizePods(pods)
	total := len(pods)
	if len(pods) > NamespaceMaxPodsToCheck {
		pods = pods[:NamespaceMaxPodsToCheck]
	}
	checked := len(pods)
	for i, pod := range pods {
		r := policy.AggregateCheckResults(a.evaluator.EvaluatePod(enforce, &pod.ObjectMeta, a.asEvaluated(ctx, &pod.Spec)))
		if !r.Allowed {
			w := r.ForbiddenReason()
			c, seen := counts[w]
			if !seen {
				c.name = pod.Name
				podWarnings = append(podWarnings, w)
			} else if pod.Name < c.name {
				c.name = pod.Name
			}
			c.n++
			counts[w] = c
		}
		if ctx.Err() != nil {
			checked = i + 1
			break
		}
	}
	if checked < total {
		warnings = append(warnings, fmt.Sprintf("new PodSecurity enforce level only checked against the first %d of %d existing pods", checked, total))
	}
	if len(podWarnings) > 0 {
		warnings = append(warnings, fmt.Sprintf("existing pods in namespace %q violate the new PodSecurity enforce level %q", namespace, enforce.String()))
	}
	for i, w := range podWarnings {
		switch c := counts[w]; c.n {
		case 1:
			podWarnings[i] = fmt.Sprintf("%s: %s", c.name, w)
		case 2:
			podWarnings[i] = fmt.Sprintf("%s (and 1 other pod): %s", c.name, w)
		default:
			podWarnings[i] = fmt.Sprintf("%s (and %d other pods): %s", c.name, c.n-1, w)
		}
	}
	sort.Strings(podWarnings)
	return append(warnings, podWarnings...)
}

// prioritizePods drops exempt pods and puts one pod per controller first.
func (a *Admission) prioritizePods(pods []*corev1.Pod) []*corev1.Pod {
	var first, dup []*corev1.Pod
	seen := map[types.UID]bool{}
	for _, p := range pods {
		if a.exemptRuntimeClass(p.Spec.RuntimeClassName) {
			continue
		}
		ref := metav1.GetControllerOfNoCopy(p)
		switch {
		case ref == nil:
			first = append(first, p)
		case seen[ref.UID]:
			dup = append(dup, p)
		default:
			seen[ref.UID] = true
			first = append(first, p)
		}
	}
	return append(first, dup...)
}

// isSignificantPodUpdate: only a container image can change on a pod
// update among what the checks read (Kubernetes' rule).
func isSignificantPodUpdate(pod, old *corev1.Pod) bool {
	if len(pod.Spec.Containers) != len(old.Spec.Containers) || len(pod.Spec.InitContainers) != len(old.Spec.InitContainers) {
		return true
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Image != old.Spec.Containers[i].Image {
			return true
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Image != old.Spec.InitContainers[i].Image {
			return true
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		i := slices.IndexFunc(old.Spec.EphemeralContainers, func(o corev1.EphemeralContainer) bool { return o.Name == c.Name })
		if i < 0 || old.Spec.EphemeralContainers[i].Image != c.Image {
			return true
		}
	}
	return false
}

func (a *Admission) exemptNamespace(ns string) bool {
	return ns != "" && slices.Contains(a.conf.Exemptions.Namespaces, ns)
}

func (a *Admission) exemptUser(name string) bool {
	return name != "" && slices.Contains(a.conf.Exemptions.Usernames, name)
}

func (a *Admission) exemptRuntimeClass(rc *string) bool {
	return rc != nil && *rc != "" && slices.Contains(a.conf.Exemptions.RuntimeClasses, *rc)
}

// exemptNamespaceWarning warns when an exempt namespace sets a
// non-privileged policy that will not apply.
func (a *Admission) exemptNamespaceWarning(ns string, p api.Policy, labels map[string]string) string {
	if p.FullyPrivileged() || p.Equivalent(&a.defaultPolicy) {
		return ""
	}
	var parts []string
	for _, m := range []struct {
		name           string
		lv             api.LevelVersion
		level, version string
	}{
		{"enforce", p.Enforce, api.EnforceLevelLabel, api.EnforceVersionLabel},
		{"audit", p.Audit, api.AuditLevelLabel, api.AuditVersionLabel},
		{"warn", p.Warn, api.WarnLevelLabel, api.WarnVersionLabel},
	} {
		_, hasLevel := labels[m.level]
		_, hasVersion := labels[m.version]
		if m.lv.Level != api.LevelPrivileged && (hasLevel || hasVersion) {
			parts = append(parts, m.name+"="+m.lv.String())
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("namespace %q is exempt from Pod Security, and the policy (%s) will be ignored", ns, strings.Join(parts, ", "))
}
