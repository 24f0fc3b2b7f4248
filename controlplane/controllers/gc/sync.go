package gc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/store"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func (c *Controller) sync(ctx context.Context, key string) error {
	if uid, ok := strings.CutPrefix(key, gonePrefix); ok {
		for _, d := range c.dependentsOf(types.UID(uid)) {
			c.queue.Add(resourceKey(d.res) + keySep + store.KeyOf(d.obj))
		}
		return nil
	}
	resource, objKey := splitQueueKey(key)
	inf, ok := c.informer(resource)
	if !ok {
		return nil
	}
	ns, name := ctrlutil.SplitKey(objKey)
	obj, ok := inf.Get(ns, name)
	if !ok {
		return nil
	}
	res := inf.Resource()
	if obj.GetDeletionTimestamp() != nil {
		switch {
		case ctrlutil.HasFinalizer(obj, metav1.FinalizerOrphanDependents):
			return c.orphanDependents(ctx, res, obj)
		case ctrlutil.HasFinalizer(obj, metav1.FinalizerDeleteDependents):
			return c.deleteDependents(ctx, res, obj)
		}
	}
	unobserved, err := c.checkOwners(ctx, res, obj)
	if err == nil && unobserved {
		// No event of the owner's informer is sure to come: check again.
		c.queue.AddAfter(key, unobservedRecheck)
	}
	return err
}

// unobservedRecheck is how long a dependent whose owner exists but has
// not been seen by its informer yet waits before it is checked again.
const unobservedRecheck = 250 * time.Millisecond

// checkOwners deletes obj when all its owners are gone, or drops the
// references to the owners that are gone. It reports whether an owner
// found present was not in its informer's cache (see ownerGone): obj must
// then be checked again.
func (c *Controller) checkOwners(ctx context.Context, res store.Resource, obj store.Object) (unobserved bool, err error) {
	refs := obj.GetOwnerReferences()
	if len(refs) == 0 || obj.GetDeletionTimestamp() != nil {
		return false, nil
	}
	var dangling []types.UID
	for _, ref := range refs {
		gone, unseen, err := c.ownerGone(ctx, obj.GetNamespace(), ref)
		if err != nil {
			return false, err
		}
		unobserved = unobserved || unseen
		if gone {
			dangling = append(dangling, ref.UID)
		}
	}
	switch {
	case len(dangling) == 0:
		return unobserved, nil
	case len(dangling) < len(refs):
		return unobserved, c.mutate(ctx, res, obj, func(o store.Object) bool {
			changed := false
			for _, uid := range dangling {
				changed = ctrlutil.RemoveOwnerReference(o, uid) || changed
			}
			return changed
		})
	default:
		return false, c.delete(ctx, res, obj)
	}
}

// ownerGone reports whether the owner ref names no longer exists (with
// that uid). Owners of kinds the store does not keep count as present.
//
// unobserved reports an owner the store has but the informer of its kind
// has not seen (that informer has not listed yet, lags, or is not started
// yet for a kind added at run time): its deletion may never be reported
// to the handlers (an informer whose first list comes after the delete
// emits nothing for it), so the dependent must be checked again until the
// informer has seen the owner, as Kubernetes' garbage collector requeues
// a dependent whose owner is a virtual node not yet observed by an
// informer (attemptToDeleteWorker, kubernetes/kubernetes#56121).
func (c *Controller) ownerGone(ctx context.Context, namespace string, ref metav1.OwnerReference) (gone, unobserved bool, err error) {
	k, ok := c.kindFor(ref)
	if !ok {
		return false, false, nil
	}
	r := k.Resource
	if !r.Namespaced {
		namespace = ""
	}
	if inf, ok := c.informer(resourceKey(r)); ok {
		if o, ok := inf.Get(namespace, ref.Name); ok && o.GetUID() == ref.UID {
			return false, false, nil
		}
	}
	// The cache may lag: confirm with the store, as the Kubernetes GC
	// confirms with a live lookup before it deletes.
	o, err := c.s.Get(ctx, r, namespace, ref.Name)
	if apierrors.IsNotFound(err) {
		return true, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("look up owner %s %s/%s: %w", r.Kind, namespace, ref.Name, err)
	}
	if o.GetUID() != ref.UID {
		return true, false, nil
	}
	return false, c.watched(k), nil
}

// orphanDependents removes owner's references from its dependents, then
// the "orphan" finalizer.
func (c *Controller) orphanDependents(ctx context.Context, res store.Resource, owner store.Object) error {
	var errs []error
	for _, d := range c.dependentsOf(owner.GetUID()) {
		err := c.mutate(ctx, d.res, d.obj, func(o store.Object) bool { return ctrlutil.RemoveOwnerReference(o, owner.GetUID()) })
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("orphan dependents of %s %s: %w", res.Kind, store.KeyOf(owner), err)
	}
	return c.removeFinalizer(ctx, res, owner, metav1.FinalizerOrphanDependents)
}

// deleteDependents deletes owner's dependents; once none is left it
// removes the "foregroundDeletion" finalizer.
func (c *Controller) deleteDependents(ctx context.Context, res store.Resource, owner store.Object) error {
	deps := c.dependentsOf(owner.GetUID())
	if len(deps) == 0 {
		if !c.synced() {
			return fmt.Errorf("foreground deletion of %s %s: informers not synced yet", res.Kind, store.KeyOf(owner)) // requeued
		}
		return c.removeFinalizer(ctx, res, owner, metav1.FinalizerDeleteDependents)
	}
	var errs []error
	for _, d := range deps {
		switch {
		case d.obj.GetDeletionTimestamp() != nil:
		case c.mayOwn(d.res) && len(c.dependentsOf(d.obj.GetUID())) > 0:
			// As Kubernetes' garbage collector: a dependent with
			// dependents of its own, of an owner deleted in the
			// foreground, is deleted in the foreground too, so the
			// owner goes only once the whole tree (a Deployment's
			// ReplicaSets and their pods) is gone.
			errs = append(errs, c.deleteInForeground(ctx, d.res, d.obj))
		default:
			errs = append(errs, c.delete(ctx, d.res, d.obj))
		}
	}
	return errors.Join(errs...) // the dependents' delete events requeue owner
}

// mayOwn reports whether objects of r may have dependents (not pods:
// registry.Kind.NoDependents).
func (c *Controller) mayOwn(r store.Resource) bool {
	k, ok := c.reg.ForResource(r)
	return !ok || !k.NoDependents
}

// deleteInForeground deletes obj with propagationPolicy=Foreground, as
// the API does (registry.Delete: the "foregroundDeletion" finalizer);
// the controller then deletes its dependents before it.
func (c *Controller) deleteInForeground(ctx context.Context, res store.Resource, obj store.Object) error {
	fg := metav1.DeletePropagationForeground
	uid := obj.GetUID()
	_, err := c.reg.Delete(ctx, c.s, res, obj.GetNamespace(), obj.GetName(), metav1.DeleteOptions{PropagationPolicy: &fg, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s %s in the foreground: %w", res.Kind, store.KeyOf(obj), err)
	}
	return nil
}

// removeFinalizer removes f from obj through the registry, which deletes
// it when no finalizer is left (registry.GuaranteedUpdate, as the API's
// update).
func (c *Controller) removeFinalizer(ctx context.Context, res store.Resource, obj store.Object, f string) error {
	uid := obj.GetUID()
	_, err := c.reg.GuaranteedUpdate(ctx, c.s, res, obj.GetNamespace(), obj.GetName(), &store.Preconditions{UID: &uid}, func(cur store.Object) (store.Object, error) {
		ctrlutil.RemoveFinalizer(cur, f)
		return cur, nil
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("remove finalizer %s from %s %s: %w", f, res.Kind, store.KeyOf(obj), err)
	}
	return nil
}

// delete deletes obj (background propagation) as the API does
// (registry.Delete: a bound pod gracefully, an object with finalizers
// only marked). A stale obj (uid or revision moved) is requeued.
func (c *Controller) delete(ctx context.Context, res store.Resource, obj store.Object) error {
	if pod, ok := obj.(*corev1.Pod); ok && res.Plural == store.Pods.Plural {
		return ctrlutil.DeletePod(ctx, c.reg, c.s, pod)
	}
	uid, rv := obj.GetUID(), obj.GetResourceVersion()
	_, err := c.reg.Delete(ctx, c.s, res, obj.GetNamespace(), obj.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s %s: %w", res.Kind, store.KeyOf(obj), err)
	}
	return nil
}

// errUnchanged aborts a GuaranteedUpdate that has nothing to write.
var errUnchanged = errors.New("unchanged")

// mutate applies fn to the stored obj (same uid) and writes it through
// the registry when fn reports a change.
func (c *Controller) mutate(ctx context.Context, res store.Resource, obj store.Object, fn func(store.Object) bool) error {
	_, err := c.reg.GuaranteedUpdate(ctx, c.s, res, obj.GetNamespace(), obj.GetName(), nil, func(cur store.Object) (store.Object, error) {
		if cur.GetUID() != obj.GetUID() || !fn(cur) {
			return nil, errUnchanged // fn may have touched cur: write nothing
		}
		return cur, nil
	})
	if errors.Is(err, errUnchanged) {
		return nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("update owner references of %s %s: %w", res.Kind, store.KeyOf(obj), err)
	}
	return nil
}
