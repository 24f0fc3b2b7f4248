package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"time"

	"github.com/labstack/echo/v4"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/orca-edge/orca/controlplane/registry/policy"
	"github.com/orca-edge/orca/controlplane/store"
)

// MaxDisruptedPodSize is the most entries a PodDisruptionBudget's
// status.disruptedPods may hold before evictions of its pods are refused
// (403), as Kubernetes': that many approved evictions the disruption
// controller has not seen yet means it is not keeping up.
const MaxDisruptedPodSize = 2000

// evictionsRetry is how often an eviction retries a conflicting write, as
// Kubernetes' EvictionsRetry: 20 attempts 500 ms apart (with 10% jitter).
var evictionsRetry = wait.Backoff{Steps: 20, Duration: 500 * time.Millisecond, Factor: 1.0, Jitter: 0.1}

// evictionGroupVersions are the Eviction versions a body may use.
var evictionGroupVersions = map[string]bool{"policy/v1": true, "policy/v1beta1": true}

// evict answers POST pods/<name>/eviction with a policy/v1 (or v1beta1)
// Eviction, as Kubernetes' pkg/registry/core/pod/storage/eviction.go:
//   - a pod that is Pending, Succeeded, Failed or already being deleted is
//     deleted without looking at PodDisruptionBudgets;
//   - a pod matched by no PDB is deleted; by more than one, the answer is
//     a 500 Status ("This pod has more than one PodDisruptionBudget, which
//     the eviction subresource does not support.");
//   - a pod that is not Ready is deleted without spending the budget when
//     its PDB's unhealthyPodEvictionPolicy is AlwaysAllow, or (default
//     IfHealthyBudget) when currentHealthy >= desiredHealthy > 0 — then at
//     the resourceVersion it was read at, so a pod that became ready since
//     gets a 429;
//   - otherwise the PDB must allow a disruption: status.observedGeneration
//     behind metadata.generation is a 429 (Retry-After 10 s), a negative
//     disruptionsAllowed or more than MaxDisruptedPodSize disruptedPods a
//     403, disruptionsAllowed 0 a 429 "Cannot evict pod as it would violate
//     the pod's disruption budget." with a DisruptionBudget cause; else
//     disruptionsAllowed is decremented and the pod recorded in
//     disruptedPods in one guaranteed update of the PDB (conflicts retried
//     as evictionsRetry), then the pod gets a DisruptionTarget condition
//     (reason EvictionByEvictionAPI) and is deleted with the Eviction's
//     deleteOptions (grace period, preconditions, propagation);
//   - dryRun (query or deleteOptions; they must agree) checks everything
//     and writes nothing.
//
// Success is 201 with a Success Status.
func (s *Server) evict(c echo.Context, ri reqInfo) error {
	ctx := c.Request().Context()
	data, err := s.bodyJSON(c)
	if err != nil {
		return err
	}
	var ev policyv1.Eviction
	if err := json.Unmarshal(data, &ev); err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("decode Eviction: %v", err))
	}
	if ev.Kind != "Eviction" || !evictionGroupVersions[ev.APIVersion] {
		return apierrors.NewBadRequest(fmt.Sprintf("the body of pods/eviction must be a policy/v1 or policy/v1beta1 Eviction, not %s %q", ev.APIVersion, ev.Kind))
	}
	if ev.Namespace != "" && ev.Namespace != ri.namespace {
		return apierrors.NewBadRequest(fmt.Sprintf("the namespace of the provided object (%s) does not match the namespace sent on the request (%s)", ev.Namespace, ri.namespace))
	}
	if ev.Name != ri.name {
		return apierrors.NewBadRequest("name in URL does not match name in Eviction object")
	}
	var queryDryRun []string
	if isDryRun(c.Request().URL.Query()) {
		queryDryRun = []string{metav1.DryRunAll}
	}
	opts, err := propagateDryRun(&ev, queryDryRun)
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if err := s.admitNodeDelete(ctx, store.Pods, "eviction", ri.namespace, ri.name); err != nil { // admission_node.go: nodes evict only their pods
		return err
	}
	st, err := s.evictPod(ctx, ri.namespace, ri.name, opts)
	if err != nil {
		return err
	}
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	return writeJSON(c, int(st.Code), st)
}

// propagateDryRun merges the request's dryRun into the Eviction's
// deleteOptions, as Kubernetes: both set and different is an error.
func propagateDryRun(ev *policyv1.Eviction, dryRun []string) (*metav1.DeleteOptions, error) {
	if ev.DeleteOptions == nil {
		return &metav1.DeleteOptions{DryRun: dryRun}, nil
	}
	if len(ev.DeleteOptions.DryRun) == 0 {
		ev.DeleteOptions.DryRun = dryRun
		return ev.DeleteOptions, nil
	}
	if len(dryRun) > 0 && !reflect.DeepEqual(dryRun, ev.DeleteOptions.DryRun) {
		return nil, fmt.Errorf("Non-matching dry-run options in request and content: %v and %v", dryRun, ev.DeleteOptions.DryRun)
	}
	for _, v := range ev.DeleteOptions.DryRun {
		if v != metav1.DryRunAll {
			return nil, fmt.Errorf("Invalid dry run value %q: only %q is supported", v, metav1.DryRunAll)
		}
	}
	return ev.DeleteOptions, nil
}

// evictPod is the eviction of namespace/name with opts (see evict); it
// returns the Status to answer with (201 Success, or the 500 of a pod
// with several PDBs).
func (s *Server) evictPod(ctx context.Context, namespace, name string, opts *metav1.DeleteOptions) (*metav1.Status, error) {
	dryRun := len(opts.DryRun) > 0
	var pod *corev1.Pod
	deleted := false
	shouldRetry := apierrors.IsConflict
	if !resourceVersionIsUnset(opts) {
		shouldRetry = func(error) bool { return false } // the client pinned a version
	}
	err := retry.OnError(evictionsRetry, shouldRetry, func() error {
		obj, err := s.st.Get(ctx, store.Pods, namespace, name)
		if err != nil {
			return err
		}
		pod = obj.(*corev1.Pod)
		if !canIgnorePDB(pod) {
			return nil
		}
		del := opts
		if shouldEnforceResourceVersion(pod) && resourceVersionIsUnset(opts) {
			// Not racing another PDB-minded writer: delete what was read.
			del = setPreconditionsResourceVersion(opts, pod.ResourceVersion)
		}
		if err := s.disruptAndDeletePod(ctx, namespace, name, del); err != nil {
			return err
		}
		deleted = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	success := &metav1.Status{Status: metav1.StatusSuccess, Code: http.StatusCreated}
	if deleted {
		return success, nil
	}

	pdbObjs, _, err := s.st.List(ctx, policy.PodDisruptionBudgets, namespace)
	if err != nil {
		return nil, err
	}
	pdbs := policy.MatchingPDBs(pdbObjs, pod)
	if len(pdbs) > 1 {
		return &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError,
			Message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}, nil
	}
	del := opts
	pdbName := ""
	pinned := false // the delete is pinned to the pod as read (an unhealthy pod spends no budget)
	if len(pdbs) == 1 {
		pdb := pdbs[0]
		pdbName = pdb.Name
		if !isPodReady(pod) {
			if p := pdb.Spec.UnhealthyPodEvictionPolicy; p != nil && *p == policyv1.AlwaysAllow {
				pinned = true
			} else if pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy && pdb.Status.DesiredHealthy > 0 {
				pinned = true
			}
		}
		if !pinned {
			if err := s.checkAndDecrement(ctx, pdb, pod.Name, dryRun); err != nil {
				return nil, err
			}
		}
	}
	if pinned {
		del = setPreconditionsResourceVersion(opts, pod.ResourceVersion)
	}
	if err := s.disruptAndDeletePod(ctx, namespace, name, del); err != nil {
		if apierrors.IsConflict(err) && pinned && resourceVersionIsUnset(opts) {
			// The pod changed (became ready?) since it was judged: retry.
			return nil, tooManyRequestsStillProcessing(pdbName)
		}
		return nil, err
	}
	return success, nil
}

// checkAndDecrement spends one disruption of pdb on podName through a
// guaranteed update of the stored PDB (each attempt re-checks the fresh
// object), as Kubernetes' checkAndDecrement; dryRun checks only.
func (s *Server) checkAndDecrement(ctx context.Context, pdb *policyv1.PodDisruptionBudget, podName string, dryRun bool) error {
	check := func(p *policyv1.PodDisruptionBudget) error {
		switch {
		case p.Status.ObservedGeneration < p.Generation:
			return tooManyRequestsStillProcessing(p.Name)
		case p.Status.DisruptionsAllowed < 0:
			return apierrors.NewForbidden(policy.PodDisruptionBudgets.GroupResource(), p.Name, errors.New("pdb disruptions allowed is negative"))
		case len(p.Status.DisruptedPods) > MaxDisruptedPodSize:
			return apierrors.NewForbidden(policy.PodDisruptionBudgets.GroupResource(), p.Name, errors.New("DisruptedPods map too big - too many evictions not confirmed by PDB controller"))
		case p.Status.DisruptionsAllowed == 0:
			err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
			err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause,
				Message: fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", p.Name, p.Status.DesiredHealthy, p.Status.CurrentHealthy)})
			return err
		}
		return nil
	}
	if dryRun {
		cur, err := s.st.Get(ctx, policy.PodDisruptionBudgets, pdb.Namespace, pdb.Name)
		if err != nil {
			return err
		}
		return check(cur.(*policyv1.PodDisruptionBudget))
	}
	var out error
	err := retry.OnError(evictionsRetry, apierrors.IsConflict, func() error {
		_, err := s.st.GuaranteedUpdate(ctx, policy.PodDisruptionBudgets, pdb.Namespace, pdb.Name, nil, func(cur store.Object) (store.Object, error) {
			p := cur.(*policyv1.PodDisruptionBudget)
			if err := check(p); err != nil {
				return nil, err
			}
			p.Status.DisruptionsAllowed--
			if p.Status.DisruptionsAllowed == 0 {
				policy.UpdateDisruptionAllowedCondition(p)
			}
			if p.Status.DisruptedPods == nil {
				p.Status.DisruptedPods = map[string]metav1.Time{}
			}
			// Tells the disruption controller not to count the pod as
			// healthy while its deletion is on its way.
			p.Status.DisruptedPods[podName] = metav1.Now()
			return p, nil
		})
		return err
	})
	if wait.Interrupted(err) {
		out = apierrors.NewTimeoutError(fmt.Sprintf("couldn't update PodDisruptionBudget %q due to conflicts", pdb.Name), 10)
	} else {
		out = err
	}
	return out
}

// disruptAndDeletePod adds the DisruptionTarget condition (True, reason
// EvictionByEvictionAPI) to the pod, checking opts' preconditions on it,
// then deletes it with opts (whose resourceVersion precondition, if any,
// moves to the version the condition was written at), as Kubernetes'
// addConditionAndDeletePod. A dry run only deletes (which writes
// nothing).
func (s *Server) disruptAndDeletePod(ctx context.Context, namespace, name string, opts *metav1.DeleteOptions) error {
	if len(opts.DryRun) == 0 {
		out, err := s.st.GuaranteedUpdate(ctx, store.Pods, namespace, name, nil, func(cur store.Object) (store.Object, error) {
			pod := cur.(*corev1.Pod)
			if p := opts.Preconditions; p != nil {
				if p.UID != nil && *p.UID != "" && *p.UID != pod.UID {
					return nil, apierrors.NewConflict(schema.GroupResource{Resource: "Pod"}, pod.Name,
						fmt.Errorf("the UID in the precondition (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", *p.UID, pod.UID))
				}
				if p.ResourceVersion != nil && *p.ResourceVersion != "" && *p.ResourceVersion != pod.ResourceVersion {
					return nil, apierrors.NewConflict(schema.GroupResource{Resource: "Pod"}, pod.Name,
						fmt.Errorf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%s). The object might have been modified", *p.ResourceVersion, pod.ResourceVersion))
				}
			}
			setPodCondition(&pod.Status, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting"})
			return pod, nil
		})
		if err != nil {
			return err
		}
		if !resourceVersionIsUnset(opts) {
			opts = setPreconditionsResourceVersion(opts, out.GetResourceVersion())
		}
	}
	_, err := s.reg.Delete(ctx, s.st, store.Pods, namespace, name, *opts)
	return err
}

// canIgnorePDB reports whether pod may be evicted without looking at
// PDBs: it is terminal, Pending, or already being deleted.
func canIgnorePDB(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed ||
		pod.Status.Phase == corev1.PodPending || pod.DeletionTimestamp != nil
}

// shouldEnforceResourceVersion: a pod that is neither terminal nor being
// deleted is deleted only at the version it was judged at.
func shouldEnforceResourceVersion(pod *corev1.Pod) bool {
	return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed && pod.DeletionTimestamp == nil
}

func resourceVersionIsUnset(opts *metav1.DeleteOptions) bool {
	return opts.Preconditions == nil || opts.Preconditions.ResourceVersion == nil
}

// setPreconditionsResourceVersion returns a copy of opts pinned to rv.
func setPreconditionsResourceVersion(opts *metav1.DeleteOptions, rv string) *metav1.DeleteOptions {
	out := opts.DeepCopy()
	if out.Preconditions == nil {
		out.Preconditions = &metav1.Preconditions{}
	}
	out.Preconditions.ResourceVersion = &rv
	return out
}

// tooManyRequestsStillProcessing is the 429 (Retry-After 10 s) of a PDB
// whose status does not reflect its spec or the pod yet.
func tooManyRequestsStillProcessing(pdbName string) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause,
		Message: fmt.Sprintf("The disruption budget %s is still being processed by the server.", pdbName)})
	return err
}

func isPodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setPodCondition sets cond in st; lastTransitionTime moves to now only
// when the status changes (podutil.UpdatePodCondition).
func setPodCondition(st *corev1.PodStatus, cond corev1.PodCondition) {
	cond.LastTransitionTime = metav1.Now()
	for i := range st.Conditions {
		if st.Conditions[i].Type == cond.Type {
			if st.Conditions[i].Status == cond.Status {
				cond.LastTransitionTime = st.Conditions[i].LastTransitionTime
			}
			st.Conditions[i] = cond
			return
		}
	}
	st.Conditions = append(st.Conditions, cond)
}
