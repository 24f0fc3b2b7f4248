package apiextensions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Controller serves CustomResourceDefinitions, as the Kubernetes
// apiextensions-apiserver's naming, establishing and finalizer
// controllers and its CRD handler together:
//   - it accepts a CRD's names unless another CRD of its group holds
//     them (status.acceptedNames, condition NamesAccepted, reasons
//     PluralConflict, KindConflict, ...);
//   - once the names are accepted it adds a kind to the registry for
//     each served version (unstructured custom resources in the CRD's own
//     bucket, see CustomResource) and sets condition Established;
//   - when the CRD changes it replaces those kinds; when a version stops
//     being served, or the CRD is gone, it removes them;
//   - a CRD marked for deletion (customresourcecleanup finalizer) has its
//     custom resources deleted (those with finalizers are marked and
//     waited for), then the finalizer removed, then the CRD deleted.
//
// Every apiserver process runs one over its own registry (the registry
// is per process); their status writes are compare-and-swap and agree.
type Controller struct {
	st  *store.Store
	reg *registry.Registry
	log *slog.Logger
	inf *store.Informer

	synced chan struct{} // closed once every stored CRD was synced once

	mu     sync.Mutex                                        // guards served
	served map[string]map[schema.GroupVersionResource]string // CRD name -> registered resources -> what they came from (see serve)
}

// NewController returns a controller adding and removing the kinds of
// the CRDs stored in st to reg. Run starts it.
func NewController(st *store.Store, reg *registry.Registry, log *slog.Logger) *Controller {
	if log == nil {
		log = slog.Default()
	}
	return &Controller{st: st, reg: reg, log: log, inf: store.NewInformer(st, CustomResourceDefinitions),
		synced: make(chan struct{}), served: map[string]map[schema.GroupVersionResource]string{}}
}

// Run runs the controller until ctx ends, with workers workers.
func (c *Controller) Run(ctx context.Context, workers int) {
	q := ctrlutil.NewQueue("customresourcedefinitions")
	defer q.ShutDown()
	h := ctrlutil.EnqueueHandler(q)
	// A CRD freeing names may let another of its group be accepted.
	requeueGroup := func(obj store.Object) {
		crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			return
		}
		for _, o := range c.inf.List("", nil) {
			if other := o.(*apiextensionsv1.CustomResourceDefinition); other.Spec.Group == crd.Spec.Group && other.Name != crd.Name {
				q.Add(other.Name)
			}
		}
	}
	c.inf.AddHandler(store.Handler{
		OnAdd:    h.OnAdd,
		OnUpdate: h.OnUpdate,
		OnDelete: func(obj store.Object) { h.OnDelete(obj); requeueGroup(obj) },
	})
	go c.inf.Run(ctx)
	if !c.inf.WaitForSync(ctx) {
		return
	}
	// A first pass over the stored CRDs before the workers, so that
	// Synced means their kinds are served (failures are retried by the
	// workers: the informer queued every CRD).
	for _, o := range c.inf.List("", nil) {
		if err := c.sync(ctx, o.GetName()); err != nil {
			c.log.Debug("customresourcedefinition: first sync", "crd", o.GetName(), "err", err)
		}
	}
	close(c.synced)
	ctrlutil.RunWorkers(ctx, "customresourcedefinitions", q, workers, c.sync)
}

// Synced is closed once the kinds of the CRDs stored when Run started
// are in the registry (those that could be served).
func (c *Controller) Synced() <-chan struct{} { return c.synced }

func (c *Controller) sync(ctx context.Context, key string) error {
	_, name := ctrlutil.SplitKey(key)
	obj, ok := c.inf.Get("", name)
	if !ok {
		c.unserve(name, nil)
		return nil
	}
	crd := obj.DeepCopyObject().(*apiextensionsv1.CustomResourceDefinition)
	if crd.DeletionTimestamp != nil {
		return c.finalize(ctx, crd)
	}
	names, accepted := c.acceptNames(crd)
	crd.Status.AcceptedNames = names
	apihelpers.SetCRDCondition(crd, accepted)
	established := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established,
		Status: apiextensionsv1.ConditionFalse, Reason: "NotAccepted", Message: "not all names are accepted"}
	if accepted.Status == apiextensionsv1.ConditionTrue {
		if err := c.serve(crd, false); err != nil {
			established.Reason, established.Message = "InstallationFailure", err.Error()
		} else {
			established = apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established,
				Status: apiextensionsv1.ConditionTrue, Reason: "InitialNamesAccepted", Message: "the initial names have been accepted"}
		}
	} else {
		c.unserve(crd.Name, nil)
	}
	apihelpers.SetCRDCondition(crd, established)
	return c.writeStatus(ctx, obj.(*apiextensionsv1.CustomResourceDefinition), crd)
}

// writeStatus writes the acceptedNames and conditions of want unless cur
// already has them.
func (c *Controller) writeStatus(ctx context.Context, cur, want *apiextensionsv1.CustomResourceDefinition) error {
	if reflect.DeepEqual(cur.Status.AcceptedNames, want.Status.AcceptedNames) && conditionsEqual(cur.Status.Conditions, want.Status.Conditions) {
		return nil
	}
	_, err := c.reg.GuaranteedUpdateStatus(ctx, c.st, CustomResourceDefinitions, "", want.Name, &store.Preconditions{UID: &want.UID},
		func(obj store.Object) (store.Object, error) {
			crd := obj.(*apiextensionsv1.CustomResourceDefinition)
			crd.Status.AcceptedNames = want.Status.AcceptedNames
			for _, cond := range want.Status.Conditions {
				apihelpers.SetCRDCondition(crd, cond)
			}
			return crd, nil
		})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or replaced: its own event follows
	}
	return err
}

// conditionsEqual compares conditions less their transition times.
func conditionsEqual(a, b []apiextensionsv1.CustomResourceDefinitionCondition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.LastTransitionTime, y.LastTransitionTime = metav1.Time{}, metav1.Time{}
		if x != y {
			return false
		}
	}
	return true
}

// acceptNames is the naming controller's calculateNamesAndConditions:
// each requested name is accepted when it is already this CRD's or no
// other CRD of the group has accepted it.
func (c *Controller) acceptNames(crd *apiextensionsv1.CustomResourceDefinition) (apiextensionsv1.CustomResourceDefinitionNames, apiextensionsv1.CustomResourceDefinitionCondition) {
	resources, kinds := sets.New[string](), sets.New[string]()
	for _, o := range c.inf.List("", nil) {
		other := o.(*apiextensionsv1.CustomResourceDefinition)
		if other.Spec.Group != crd.Spec.Group || other.Name == crd.Name {
			continue
		}
		n := other.Status.AcceptedNames
		resources.Insert(n.Plural, n.Singular)
		resources.Insert(n.ShortNames...)
		kinds.Insert(n.Kind, n.ListKind)
	}
	resources.Delete("")
	kinds.Delete("")
	cond := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue,
		Reason: "NoConflicts", Message: "no conflicts found"}
	req, acc := crd.Spec.Names, crd.Status.AcceptedNames
	out := acc
	conflict := func(reason, name string) {
		cond.Status, cond.Reason, cond.Message = apiextensionsv1.ConditionFalse, reason, fmt.Sprintf("%q is already in use", name)
	}
	free := func(requested, accepted string, used sets.Set[string]) bool {
		return requested == accepted || !used.Has(requested)
	}
	if free(req.Plural, acc.Plural, resources) {
		out.Plural = req.Plural
	} else {
		conflict("PluralConflict", req.Plural)
	}
	if free(req.Singular, acc.Singular, resources) {
		out.Singular = req.Singular
	} else {
		conflict("SingularConflict", req.Singular)
	}
	shortOK := true
	for _, s := range req.ShortNames {
		if !slices.Contains(acc.ShortNames, s) && resources.Has(s) {
			shortOK = false
			conflict("ShortNamesConflict", s)
		}
	}
	if shortOK {
		out.ShortNames = req.ShortNames
	}
	if free(req.Kind, acc.Kind, kinds) {
		out.Kind = req.Kind
	} else {
		conflict("KindConflict", req.Kind)
	}
	if free(req.ListKind, acc.ListKind, kinds) {
		out.ListKind = req.ListKind
	} else {
		conflict("ListKindConflict", req.ListKind)
	}
	out.Categories = req.Categories
	return out, cond
}

// terminatingVerbs are the verbs of a terminating CRD's kinds: all but
// create, as Kubernetes refuses new custom resources of a CRD being
// deleted (405).
var terminatingVerbs = slices.DeleteFunc(slices.Clone(registry.AllVerbs), func(v string) bool { return v == "create" })

// serve adds (or replaces) the kinds of crd's served versions in the
// registry and removes those of versions no longer served. The kinds of
// a terminating CRD do not allow create.
func (c *Controller) serve(crd *apiextensionsv1.CustomResourceDefinition, terminating bool) error {
	want := map[schema.GroupVersionResource]registry.Kind{}
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		cr, err := NewCustomResource(crd, v.Name)
		if err != nil {
			return err
		}
		k := cr.Kind()
		if terminating {
			k.Verbs = terminatingVerbs
		}
		want[k.GroupVersionResource()] = k
	}
	// What the registered kinds were built from: the spec (generation)
	// and the accepted names, not the resourceVersion, which every status
	// or metadata write moves (re-adding the kinds then would restart
	// everything that follows the registry).
	from := fmt.Sprintf("%s/%d/%v", crd.UID, crd.Generation, crd.Status.AcceptedNames)
	if terminating {
		from = "terminating" // its spec no longer changes what is served
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	have := c.served[crd.Name]
	if have == nil {
		have = map[schema.GroupVersionResource]string{}
		c.served[crd.Name] = have
	}
	for gvr := range have {
		if _, ok := want[gvr]; !ok {
			c.reg.Remove(gvr)
			delete(have, gvr)
		}
	}
	var errs []error
	for gvr, k := range want {
		if have[gvr] == from {
			continue
		}
		if _, ok := have[gvr]; ok {
			c.reg.Remove(gvr)
		}
		if err := c.reg.Add(k); err != nil {
			delete(have, gvr)
			errs = append(errs, err)
			continue
		}
		have[gvr] = from
	}
	return errors.Join(errs...)
}

// unserve removes the kinds of the CRD named name from the registry
// (all of them when keep is nil).
func (c *Controller) unserve(name string, keep map[schema.GroupVersionResource]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for gvr := range c.served[name] {
		if !keep[gvr] {
			c.reg.Remove(gvr)
			delete(c.served[name], gvr)
		}
	}
	if len(c.served[name]) == 0 {
		delete(c.served, name)
	}
}

// errInstancesRemain requeues a CRD whose custom resources are still
// being finalized.
var errInstancesRemain = errors.New("custom resources remain")

// finalize is the finalizer controller: it deletes every custom resource
// of crd (marking those with finalizers, as a delete through the API
// would), and once none is left removes the cleanup finalizer, and the
// CRD with it when no other finalizer is left. Creates of custom
// resources are refused meanwhile (see CustomResource.Kind).
func (c *Controller) finalize(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	if !apihelpers.CRDHasFinalizer(crd, apiextensionsv1.CustomResourceCleanupFinalizer) {
		return nil
	}
	if apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established) {
		if err := c.serve(crd, true); err != nil {
			c.log.Warn("customresourcedefinition: serving a terminating CRD", "crd", crd.Name, "err", err)
		}
	}
	res, err := c.storage(crd)
	if err != nil {
		return err
	}
	if res.Plural != "" {
		objs, _, err := c.st.List(ctx, res, "")
		if err != nil {
			return err
		}
		for _, o := range objs {
			if err := c.deleteInstance(ctx, res, o); err != nil {
				return err
			}
		}
		if objs, _, err = c.st.List(ctx, res, ""); err != nil {
			return err
		}
		if len(objs) > 0 {
			c.log.Debug("customresourcedefinition: custom resources being finalized", "crd", crd.Name, "left", len(objs))
			return fmt.Errorf("customresourcedefinition %s: %d %w", crd.Name, len(objs), errInstancesRemain)
		}
	}
	c.unserve(crd.Name, nil)
	if res.Plural != "" {
		c.st.Forget(res)
	}
	out, err := c.st.GuaranteedUpdate(ctx, CustomResourceDefinitions, "", crd.Name, &store.Preconditions{UID: &crd.UID}, func(obj store.Object) (store.Object, error) {
		cur := obj.(*apiextensionsv1.CustomResourceDefinition)
		apihelpers.CRDRemoveFinalizer(cur, apiextensionsv1.CustomResourceCleanupFinalizer)
		apihelpers.SetCRDCondition(cur, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Terminating,
			Status: apiextensionsv1.ConditionFalse, Reason: "InstanceDeletionCompleted", Message: "removed all instances"})
		return cur, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(out.GetFinalizers()) == 0 {
		if _, err := c.st.Delete(ctx, CustomResourceDefinitions, "", crd.Name, out.GetResourceVersion()); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
	}
	return nil
}

// storage returns the storage layout of crd's custom resources (any
// version: they share the bucket); an empty Resource when crd has no
// version.
func (c *Controller) storage(crd *apiextensionsv1.CustomResourceDefinition) (store.Resource, error) {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			cr, err := NewCustomResource(crd, v.Name)
			if err != nil {
				// A storage version no longer served: its layout is
				// still the CRD's bucket.
				cp := crd.DeepCopy()
				for i := range cp.Spec.Versions {
					cp.Spec.Versions[i].Served = cp.Spec.Versions[i].Name == v.Name
				}
				if cr, err = NewCustomResource(cp, v.Name); err != nil {
					return store.Resource{}, err
				}
			}
			return cr.Resource, nil
		}
	}
	return store.Resource{}, nil
}

// deleteInstance deletes one custom resource: at once without
// finalizers, else by marking it (deletionTimestamp) for its finalizers'
// owners, as a delete through the API.
func (c *Controller) deleteInstance(ctx context.Context, res store.Resource, obj store.Object) error {
	if len(obj.GetFinalizers()) == 0 {
		_, err := c.st.Delete(ctx, res, obj.GetNamespace(), obj.GetName(), "")
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	if obj.GetDeletionTimestamp() != nil {
		return nil
	}
	uid := obj.GetUID()
	_, err := c.st.GuaranteedUpdate(ctx, res, obj.GetNamespace(), obj.GetName(), &store.Preconditions{UID: &uid}, func(cur store.Object) (store.Object, error) {
		if cur.GetDeletionTimestamp() == nil {
			now := metav1.Now()
			zero := int64(0)
			cur.SetDeletionTimestamp(&now)
			cur.SetDeletionGracePeriodSeconds(&zero)
		}
		return cur, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
