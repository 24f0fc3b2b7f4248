// Package clusterroleaggregation is the ClusterRole aggregation
// controller, as kube-controller-manager's clusterrole-aggregation
// (pkg/controller/clusterroleaggregation): the rules of a ClusterRole with
// an aggregationRule are the union of the rules of the ClusterRoles its
// selectors match (by name order, each distinct rule once, the role itself
// left out), rewritten whenever any ClusterRole changes. The default
// admin, edit and view roles are built this way
// (controlplane/auth/rbac/bootstrappolicy).
package clusterroleaggregation

import (
	"context"
	"fmt"
	"sort"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry"
	regrbac "github.com/orca-edge/orca/controlplane/registry/rbac"
	"github.com/orca-edge/orca/controlplane/store"
)

// Name names the controller in logs and queue metrics.
const Name = "clusterrole-aggregation"

// Controller is the ClusterRole aggregation controller.
type Controller struct {
	s     *store.Store
	reg   *registry.Registry
	roles *store.Informer
	queue workqueue.TypedRateLimitingInterface[string]
}

// New returns the controller over a ClusterRoles informer; writes go
// through reg (which must serve regrbac.ClusterRoles).
func New(s *store.Store, reg *registry.Registry, clusterRoles *store.Informer) *Controller {
	c := &Controller{s: s, reg: reg, roles: clusterRoles, queue: ctrlutil.NewQueue(Name)}
	// The set of ClusterRoles is small and which role feeds which is not
	// known without evaluating every selector: any change requeues every
	// aggregated role, as Kubernetes does.
	clusterRoles.AddHandler(store.Handler{
		OnAdd:    func(store.Object) { c.enqueueAll() },
		OnUpdate: func(_, _ store.Object) { c.enqueueAll() },
		OnDelete: func(store.Object) { c.enqueueAll() },
	})
	return c
}

func (c *Controller) enqueueAll() {
	for _, o := range c.roles.List("", nil) {
		if o.(*rbacv1.ClusterRole).AggregationRule != nil {
			c.queue.Add(o.GetName())
		}
	}
}

// Run processes aggregated ClusterRoles with workers goroutines until ctx
// ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

// Aggregate returns the rules of role's aggregation: each rule of each
// ClusterRole in all that one of its selectors matches (role itself
// excluded), in selector then name order, duplicates dropped. A selector
// that does not parse is an error.
func Aggregate(role *rbacv1.ClusterRole, all []*rbacv1.ClusterRole) ([]rbacv1.PolicyRule, error) {
	rules := []rbacv1.PolicyRule{}
	sorted := append([]*rbacv1.ClusterRole(nil), all...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for i := range role.AggregationRule.ClusterRoleSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&role.AggregationRule.ClusterRoleSelectors[i])
		if err != nil {
			return nil, fmt.Errorf("clusterrole %s: aggregationRule selector %d: %w", role.Name, i, err)
		}
		for _, other := range sorted {
			if other.Name == role.Name || !sel.Matches(labels.Set(other.Labels)) {
				continue
			}
			for _, r := range other.Rules {
				if !ruleExists(rules, r) {
					rules = append(rules, r)
				}
			}
		}
	}
	return rules, nil
}

func ruleExists(haystack []rbacv1.PolicyRule, needle rbacv1.PolicyRule) bool {
	for _, r := range haystack {
		if equality.Semantic.DeepEqual(r, needle) {
			return true
		}
	}
	return false
}

// sync rewrites the rules of the aggregated ClusterRole name when they
// differ from its aggregation.
func (c *Controller) sync(ctx context.Context, name string) error {
	o, ok := c.roles.Get("", name)
	if !ok {
		return nil
	}
	role := o.(*rbacv1.ClusterRole)
	if role.AggregationRule == nil {
		return nil
	}
	var all []*rbacv1.ClusterRole
	for _, x := range c.roles.List("", nil) {
		all = append(all, x.(*rbacv1.ClusterRole))
	}
	rules, err := Aggregate(role, all)
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(rules, role.Rules) {
		return nil
	}
	_, err = c.reg.GuaranteedUpdate(ctx, c.s, regrbac.ClusterRoles, "", name, &store.Preconditions{UID: &role.UID}, func(cur store.Object) (store.Object, error) {
		r := cur.(*rbacv1.ClusterRole)
		r.Rules = rules
		return r, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("aggregate clusterrole %s: %w", name, err)
	}
	return nil
}
