package bootstrappolicy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/auth/rbac/validation"

	"github.com/orca-edge/orca/controlplane/registry"
	regrbac "github.com/orca-edge/orca/controlplane/registry/rbac"
	"github.com/orca-edge/orca/controlplane/store"
)

// Reconcile makes the stored defaults cover ClusterRoles and
// ClusterRoleBindings, as kube-apiserver's rbac/bootstrap-roles post-start
// hook in its union mode (component-helpers' auth/rbac/reconciliation,
// ported: that package's client interfaces pull in every typed clientset
// of client-go, 15 MB of orca-server): a missing object is created; a
// default whose rules, aggregationRule, labels, annotations or subjects
// lack something gets it added (what was added by hand stays); one
// annotated rbac.authorization.kubernetes.io/autoupdate=false is left
// alone; a binding whose roleRef changed is recreated. Writes go through
// reg (the kinds' validation). A conflict is retried; the first other
// error of each object is returned, joined, after all were tried.
func Reconcile(ctx context.Context, st *store.Store, reg *registry.Registry) error {
	var errs []error
	for _, role := range ClusterRoles() {
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error { return reconcileRole(ctx, st, reg, &role) })
		if err != nil {
			errs = append(errs, fmt.Errorf("reconcile clusterrole %s: %w", role.Name, err))
		}
	}
	for _, b := range ClusterRoleBindings() {
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error { return reconcileBinding(ctx, st, reg, &b) })
		if err != nil {
			errs = append(errs, fmt.Errorf("reconcile clusterrolebinding %s: %w", b.Name, err))
		}
	}
	return errors.Join(errs...)
}

// reconcileRole creates want or adds to the stored role what it lacks of
// want (reconciliation's computeReconciledRole with
// removeExtraPermissions=false).
func reconcileRole(ctx context.Context, st *store.Store, reg *registry.Registry, want *rbacv1.ClusterRole) error {
	o, err := st.Get(ctx, regrbac.ClusterRoles, "", want.Name)
	if apierrors.IsNotFound(err) {
		_, err = reg.Create(ctx, st, regrbac.ClusterRoles, want.DeepCopy())
		if apierrors.IsAlreadyExists(err) { // created meanwhile: reconcile it
			return apierrors.NewConflict(regrbac.ClusterRoles.GroupResource(), want.Name, err)
		}
		return err
	}
	if err != nil {
		return err
	}
	cur := o.(*rbacv1.ClusterRole)
	if cur.Annotations[rbacv1.AutoUpdateAnnotationKey] == "false" {
		return nil
	}
	next := cur.DeepCopy()
	next.Annotations = merged(want.Annotations, cur.Annotations)
	next.Labels = merged(want.Labels, cur.Labels)
	changed := !reflect.DeepEqual(next.Annotations, cur.Annotations) || !reflect.DeepEqual(next.Labels, cur.Labels)
	if _, missing := validation.Covers(cur.Rules, want.Rules); len(missing) > 0 {
		next.Rules = append(next.Rules, missing...)
		changed = true
	}
	switch {
	case want.AggregationRule == nil && cur.AggregationRule != nil:
		next.AggregationRule = nil
		changed = true
	case want.AggregationRule != nil:
		if missing := missingSelectors(cur.AggregationRule, want.AggregationRule.ClusterRoleSelectors); len(missing) > 0 {
			if next.AggregationRule == nil {
				next.AggregationRule = &rbacv1.AggregationRule{}
			}
			next.AggregationRule.ClusterRoleSelectors = append(next.AggregationRule.ClusterRoleSelectors, missing...)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	_, err = update(ctx, st, reg, regrbac.ClusterRoles, next)
	return err
}

// reconcileBinding creates want, recreates a binding whose roleRef
// differs, or adds the labels, annotations and subjects it lacks
// (reconciliation's computeReconciledRoleBinding, union mode).
func reconcileBinding(ctx context.Context, st *store.Store, reg *registry.Registry, want *rbacv1.ClusterRoleBinding) error {
	r := regrbac.ClusterRoleBindings
	o, err := st.Get(ctx, r, "", want.Name)
	if apierrors.IsNotFound(err) {
		_, err = reg.Create(ctx, st, r, want.DeepCopy())
		if apierrors.IsAlreadyExists(err) {
			return apierrors.NewConflict(r.GroupResource(), want.Name, err)
		}
		return err
	}
	if err != nil {
		return err
	}
	cur := o.(*rbacv1.ClusterRoleBinding)
	if cur.Annotations[rbacv1.AutoUpdateAnnotationKey] == "false" {
		return nil
	}
	if cur.RoleRef != want.RoleRef { // roleRef is immutable: delete, then create
		if _, err := st.Delete(ctx, r, "", cur.Name, cur.GetResourceVersion()); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return apierrors.NewConflict(r.GroupResource(), want.Name, errors.New("recreated with the default roleRef"))
	}
	next := cur.DeepCopy()
	next.Annotations = merged(want.Annotations, cur.Annotations)
	next.Labels = merged(want.Labels, cur.Labels)
	changed := !reflect.DeepEqual(next.Annotations, cur.Annotations) || !reflect.DeepEqual(next.Labels, cur.Labels)
	for _, s := range want.Subjects {
		if !containsSubject(next.Subjects, s) {
			next.Subjects = append(next.Subjects, s)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	_, err = update(ctx, st, reg, r, next)
	return err
}

// merged is want's entries under cur's (cur wins), nil when both are empty.
func merged(want, cur map[string]string) map[string]string {
	if want == nil && cur == nil {
		return nil
	}
	out := maps.Clone(want)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, cur)
	return out
}

// missingSelectors are the selectors of want no selector of have equals.
func missingSelectors(have *rbacv1.AggregationRule, want []metav1.LabelSelector) []metav1.LabelSelector {
	var out []metav1.LabelSelector
	for _, w := range want {
		found := false
		if have != nil {
			for _, h := range have.ClusterRoleSelectors {
				if equality.Semantic.DeepEqual(h, w) {
					found = true
					break
				}
			}
		}
		if !found {
			out = append(out, w)
		}
	}
	return out
}

func containsSubject(list []rbacv1.Subject, s rbacv1.Subject) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// update writes want over the stored object it was computed from: a
// compare-and-swap on want's resourceVersion (a conflict is retried by
// Reconcile with a fresh read).
func update(ctx context.Context, st *store.Store, reg *registry.Registry, r store.Resource, want store.Object) (store.Object, error) {
	rv := want.GetResourceVersion()
	return reg.GuaranteedUpdate(ctx, st, r, "", want.GetName(), nil, func(cur store.Object) (store.Object, error) {
		if cur.GetResourceVersion() != rv {
			return nil, apierrors.NewConflict(r.GroupResource(), want.GetName(), errors.New("the object has been modified"))
		}
		return want.DeepCopyObject().(store.Object), nil
	})
}
