package bootstrappolicy

import (
	"context"
	"errors"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/auth/rbac/reconciliation"

	"github.com/orca-edge/orca/controlplane/registry"
	regrbac "github.com/orca-edge/orca/controlplane/registry/rbac"
	"github.com/orca-edge/orca/controlplane/store"
)

// Reconcile makes the stored defaults cover ClusterRoles and
// ClusterRoleBindings, as kube-apiserver's rbac/bootstrap-roles post-start
// hook, with component-helpers' reconciliation: a missing object is
// created; a default whose rules, aggregationRule, labels, annotations or
// subjects lack something gets it added (what was added by hand stays);
// one annotated rbac.authorization.kubernetes.io/autoupdate=false is left
// alone; a binding whose roleRef changed is recreated. Writes go through
// reg (the kinds' validation). A conflict is retried; the first other
// error of each object is returned, joined, after all were tried.
func Reconcile(ctx context.Context, st *store.Store, reg *registry.Registry) error {
	var errs []error
	for _, role := range ClusterRoles() {
		role := role
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			opts := reconciliation.ReconcileRoleOptions{Role: reconciliation.ClusterRoleRuleOwner{ClusterRole: &role},
				Client: clusterRoles{ctx: ctx, st: st, reg: reg}, Confirm: true}
			_, err := opts.Run()
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("reconcile clusterrole %s: %w", role.Name, err))
		}
	}
	for _, b := range ClusterRoleBindings() {
		b := b
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			opts := reconciliation.ReconcileRoleBindingOptions{RoleBinding: reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: &b},
				Client: clusterRoleBindings{ctx: ctx, st: st, reg: reg}, Confirm: true}
			_, err := opts.Run()
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("reconcile clusterrolebinding %s: %w", b.Name, err))
		}
	}
	return errors.Join(errs...)
}

// clusterRoles is reconciliation's RuleOwnerModifier over the store.
type clusterRoles struct {
	ctx context.Context
	st  *store.Store
	reg *registry.Registry
}

func (c clusterRoles) Get(_, name string) (reconciliation.RuleOwner, error) {
	o, err := c.st.Get(c.ctx, regrbac.ClusterRoles, "", name)
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: o.(*rbacv1.ClusterRole)}, nil
}

func (c clusterRoles) Create(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	o, err := c.reg.Create(c.ctx, c.st, regrbac.ClusterRoles, in.(reconciliation.ClusterRoleRuleOwner).ClusterRole.DeepCopy())
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: o.(*rbacv1.ClusterRole)}, nil
}

func (c clusterRoles) Update(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	want := in.(reconciliation.ClusterRoleRuleOwner).ClusterRole
	o, err := update(c.ctx, c.st, c.reg, regrbac.ClusterRoles, want)
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: o.(*rbacv1.ClusterRole)}, nil
}

// clusterRoleBindings is reconciliation's RoleBindingModifier over the
// store.
type clusterRoleBindings struct {
	ctx context.Context
	st  *store.Store
	reg *registry.Registry
}

func (c clusterRoleBindings) Get(_, name string) (reconciliation.RoleBinding, error) {
	o, err := c.st.Get(c.ctx, regrbac.ClusterRoleBindings, "", name)
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: o.(*rbacv1.ClusterRoleBinding)}, nil
}

func (c clusterRoleBindings) Create(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	o, err := c.reg.Create(c.ctx, c.st, regrbac.ClusterRoleBindings, in.(reconciliation.ClusterRoleBindingAdapter).ClusterRoleBinding.DeepCopy())
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: o.(*rbacv1.ClusterRoleBinding)}, nil
}

func (c clusterRoleBindings) Update(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	o, err := update(c.ctx, c.st, c.reg, regrbac.ClusterRoleBindings, in.(reconciliation.ClusterRoleBindingAdapter).ClusterRoleBinding)
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: o.(*rbacv1.ClusterRoleBinding)}, nil
}

func (c clusterRoleBindings) Delete(_, name string, uid types.UID) error {
	cur, err := c.st.Get(c.ctx, regrbac.ClusterRoleBindings, "", name)
	if err != nil {
		return err
	}
	if cur.GetUID() != uid {
		return apierrors.NewConflict(regrbac.ClusterRoleBindings.GroupResource(), name, errors.New("the object was replaced"))
	}
	_, err = c.st.Delete(c.ctx, regrbac.ClusterRoleBindings, "", name, cur.GetResourceVersion())
	return err
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
