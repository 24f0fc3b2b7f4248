package ctrlutil

import (
	"context"
	"errors"
	"fmt"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// errSkip ends an adopt attempt without error: the object changed so that
// it is no longer ours to adopt.
var errSkip = errors.New("skip")

// Claim returns the candidates (objects of res in owner's namespace) that
// owner controls, after adopting orphans whose labels match sel (adding a
// controller ownerReference with blockOwnerDeletion) and releasing objects
// it controls whose labels no longer match (removing its ownerReference),
// as kube-controller-manager's ControllerRefManager.ClaimObject, each an
// update through reg (registry.GuaranteedUpdate, as the API's). An owner
// being deleted neither adopts nor releases. Adoption and release are
// compare-and-swap updates retried on conflict; objects already deleted
// are skipped. The error joins every failed adoption or release; the
// returned slice is still usable then.
func Claim(ctx context.Context, reg *registry.Registry, s *store.Store, res store.Resource, owner metav1.Object, ownerGVK schema.GroupVersionKind, sel labels.Selector, candidates []store.Object) ([]store.Object, error) {
	var claimed []store.Object
	var errs []error
	for _, obj := range candidates {
		ref := metav1.GetControllerOfNoCopy(obj)
		matches := sel.Matches(labels.Set(obj.GetLabels()))
		switch {
		case ref != nil && ref.UID != owner.GetUID():
			continue // someone else's
		case ref != nil && matches:
			claimed = append(claimed, obj)
		case ref != nil:
			if owner.GetDeletionTimestamp() != nil {
				continue
			}
			if err := release(ctx, reg, s, res, owner, obj, sel); err != nil {
				errs = append(errs, err)
			}
		default:
			if !matches || owner.GetDeletionTimestamp() != nil || obj.GetDeletionTimestamp() != nil {
				continue
			}
			adopted, err := adopt(ctx, reg, s, res, owner, ownerGVK, obj, sel)
			if err != nil {
				errs = append(errs, err)
			} else if adopted != nil {
				claimed = append(claimed, adopted)
			}
		}
	}
	return claimed, errors.Join(errs...)
}

func adopt(ctx context.Context, reg *registry.Registry, s *store.Store, res store.Resource, owner metav1.Object, gvk schema.GroupVersionKind, obj store.Object, sel labels.Selector) (store.Object, error) {
	out, err := reg.GuaranteedUpdate(ctx, s, res, obj.GetNamespace(), obj.GetName(), nil, func(cur store.Object) (store.Object, error) {
		if cur.GetUID() != obj.GetUID() || metav1.GetControllerOfNoCopy(cur) != nil ||
			cur.GetDeletionTimestamp() != nil || !sel.Matches(labels.Set(cur.GetLabels())) {
			return nil, errSkip
		}
		cur.SetOwnerReferences(append(cur.GetOwnerReferences(), *metav1.NewControllerRef(owner, gvk)))
		return cur, nil
	})
	if errors.Is(err, errSkip) || apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("adopt %s %s/%s by %s %s: %w", res.Kind, obj.GetNamespace(), obj.GetName(), gvk.Kind, owner.GetName(), err)
	}
	return out, nil
}

func release(ctx context.Context, reg *registry.Registry, s *store.Store, res store.Resource, owner metav1.Object, obj store.Object, sel labels.Selector) error {
	_, err := reg.GuaranteedUpdate(ctx, s, res, obj.GetNamespace(), obj.GetName(), nil, func(cur store.Object) (store.Object, error) {
		if cur.GetUID() != obj.GetUID() || sel.Matches(labels.Set(cur.GetLabels())) {
			return nil, errSkip
		}
		if !RemoveOwnerReference(cur, owner.GetUID()) {
			return nil, errSkip
		}
		return cur, nil
	})
	if errors.Is(err, errSkip) || apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release %s %s/%s from %s: %w", res.Kind, obj.GetNamespace(), obj.GetName(), owner.GetName(), err)
	}
	return nil
}
