package registry

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
)

// Delete deletes namespace/name of the kind stored as res with
// Kubernetes' semantics (k8s.io/apiserver registry/generic/registry.Store.
// Delete), the same at the API (DELETE) and in the controllers
// (namespace content, garbage collection):
//   - preconditions (uid, resourceVersion) that do not hold are a 409;
//   - propagationPolicy Orphan (or orphanDependents=true) adds the "orphan"
//     finalizer, which the GC controller removes after orphaning the
//     dependents; Foreground adds the "foregroundDeletion" finalizer
//     (unless the kind has NoDependents), which the GC controller removes
//     once every dependent is gone, deleting the object then; Background
//     deletes the object at once and leaves dependents to the GC
//     controller;
//   - a kind with GracePeriod is deleted gracefully when it returns more
//     than 0 (a pod bound to a node): deletionTimestamp is set to now +
//     grace and deletionGracePeriodSeconds to grace; the node agent
//     finishes the deletion;
//   - a kind still Finalizing (a namespace with spec.finalizers) is only
//     marked, after PrepareForDelete (Terminating);
//   - an object with finalizers only gets deletionTimestamp;
//   - an object already marked changes only for a shorter grace period.
//
// It returns the object as deleted, or as marked. A lost compare-and-swap
// race is retried (16 times). NotFound is returned as is.
func (reg *Registry) Delete(ctx context.Context, st *store.Store, r store.Resource, namespace, name string, opts metav1.DeleteOptions) (store.Object, error) {
	k, err := reg.Kind(r)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		cur, err := st.Get(ctx, r, namespace, name)
		if err != nil {
			return nil, err
		}
		if p := opts.Preconditions; p != nil {
			if p.UID != nil && *p.UID != cur.GetUID() {
				return nil, apierrors.NewConflict(r.GroupResource(), name, fmt.Errorf("precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, cur.GetUID()))
			}
			if p.ResourceVersion != nil && *p.ResourceVersion != cur.GetResourceVersion() {
				return nil, apierrors.NewConflict(r.GroupResource(), name, fmt.Errorf("precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, cur.GetResourceVersion()))
			}
		}
		obj := cur.DeepCopyObject().(store.Object)
		orphan := (opts.PropagationPolicy != nil && *opts.PropagationPolicy == metav1.DeletePropagationOrphan) ||
			(opts.PropagationPolicy == nil && opts.OrphanDependents != nil && *opts.OrphanDependents)
		if orphan && !slices.Contains(obj.GetFinalizers(), metav1.FinalizerOrphanDependents) {
			obj.SetFinalizers(append(obj.GetFinalizers(), metav1.FinalizerOrphanDependents))
		}
		foreground := opts.PropagationPolicy != nil && *opts.PropagationPolicy == metav1.DeletePropagationForeground
		if foreground && !k.NoDependents && !slices.Contains(obj.GetFinalizers(), metav1.FinalizerDeleteDependents) {
			obj.SetFinalizers(append(obj.GetFinalizers(), metav1.FinalizerDeleteDependents))
		}
		grace := int64(0)
		if k.GracePeriod != nil {
			grace = k.GracePeriod(obj, opts.GracePeriodSeconds)
		}
		finalizing := k.Finalizing != nil && k.Finalizing(obj)
		if k.PrepareForDelete != nil {
			k.PrepareForDelete(obj)
		}
		dryRun := len(opts.DryRun) > 0
		if grace == 0 && !finalizing && len(obj.GetFinalizers()) == 0 {
			if dryRun {
				return cur, nil
			}
			out, err := st.Delete(ctx, r, namespace, name, cur.GetResourceVersion())
			if apierrors.IsConflict(err) && attempt < 16 {
				continue
			}
			return out, err
		}
		now := time.Now()
		if old := cur.GetDeletionTimestamp(); old != nil {
			// Already being deleted: only a shorter grace period changes it.
			og := cur.GetDeletionGracePeriodSeconds()
			if og != nil && grace >= *og && reflect.DeepEqual(obj.GetFinalizers(), cur.GetFinalizers()) {
				return cur, nil
			}
			if og != nil && grace < *og {
				ts := metav1.NewTime(now.Add(time.Duration(grace) * time.Second))
				if ts.Before(old) {
					obj.SetDeletionTimestamp(&ts)
				}
				obj.SetDeletionGracePeriodSeconds(&grace)
			}
		} else {
			ts := metav1.NewTime(now.Add(time.Duration(grace) * time.Second))
			obj.SetDeletionTimestamp(&ts)
			obj.SetDeletionGracePeriodSeconds(&grace)
		}
		if dryRun {
			return obj, nil
		}
		out, err := st.Update(ctx, r, obj)
		if apierrors.IsConflict(err) && attempt < 16 {
			continue
		}
		if err != nil {
			return nil, err
		}
		if grace == 0 && ShouldDeleteDuringUpdate(k, out) {
			// A pod whose grace was shortened to 0 and has no finalizers.
			return st.Delete(ctx, r, namespace, name, out.GetResourceVersion())
		}
		return out, nil
	}
}

// ShouldDeleteDuringUpdate mirrors the generic registry's
// ShouldDeleteDuringUpdate: an object marked for deletion whose last
// finalizer is gone (and the kind's own finalization: Kind.Finalizing),
// with no grace period pending, is deleted.
func ShouldDeleteDuringUpdate(k *Kind, obj store.Object) bool {
	if obj.GetDeletionTimestamp() == nil || len(obj.GetFinalizers()) > 0 {
		return false
	}
	if g := obj.GetDeletionGracePeriodSeconds(); g != nil && *g > 0 {
		return false
	}
	return k.Finalizing == nil || !k.Finalizing(obj)
}
