package registry

import (
	"context"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/orca-edge/orca/controlplane/store"
)

// maxGenerateNameAttempts bounds the names tried for one generateName
// create: a generated name already taken is drawn again up to 8 times.
const maxGenerateNameAttempts = 8

// Kind returns the kind stored as res, or a 404 NotFound naming it.
func (r *Registry) Kind(res store.Resource) (*Kind, error) {
	k, ok := r.ForResource(res)
	if !ok {
		return nil, apierrors.NewNotFound(res.GroupResource(), "")
	}
	return k, nil
}

// Create stores obj, a new object of the kind stored as res, after
// the mutating admission plugins (AdmitMutating), BeforeCreate and the
// validating admission plugins (Admit), as a create
// through the API does (less the namespace's existence check). A generated name already taken
// is drawn again (up to 8 names). It returns the stored object; errors
// are the store's (409 AlreadyExists) or BeforeCreate's (422 Invalid).
func (r *Registry) Create(ctx context.Context, st *store.Store, res store.Resource, obj store.Object) (store.Object, error) {
	k, err := r.Kind(res)
	if err != nil {
		return nil, err
	}
	generate := obj.GetName() == "" && obj.GetGenerateName() != ""
	for attempt := 1; ; attempt++ {
		if generate {
			obj.SetName("")
		}
		if attempt == 1 {
			if err := r.AdmitMutating(ctx, AdmissionAttributes{Operation: admissionv1.Create, Resource: res, Object: obj}); err != nil {
				return nil, err
			}
		}
		if err := BeforeCreate(k, obj); err != nil {
			return nil, err
		}
		if err := r.Admit(ctx, AdmissionAttributes{Operation: admissionv1.Create, Resource: res, Object: obj}); err != nil {
			return nil, err
		}
		out, err := st.Create(ctx, res, obj)
		if generate && apierrors.IsAlreadyExists(err) && attempt < maxGenerateNameAttempts {
			continue
		}
		return out, err
	}
}

// GuaranteedUpdate is store.GuaranteedUpdate of the main resource with
// BeforeUpdate applied to what mutate returns, as an update through the
// API: system metadata kept, generation bumped on a spec change,
// defaults, validation (422); an object left marked for deletion with no
// finalizer is then deleted (ShouldDeleteDuringUpdate), as the API does.
// For a kind with a status subresource the
// stored status stays: write it with GuaranteedUpdateStatus.
func (r *Registry) GuaranteedUpdate(ctx context.Context, st *store.Store, res store.Resource, namespace, name string, precond *store.Preconditions, mutate store.UpdateFunc) (store.Object, error) {
	return r.GuaranteedUpdateSubresource(ctx, st, res, "", namespace, name, precond, mutate)
}

// GuaranteedUpdateStatus is GuaranteedUpdate of the status subresource:
// only status and metadata (less ownerReferences) change, as a PUT of
// <plural>/status.
func (r *Registry) GuaranteedUpdateStatus(ctx context.Context, st *store.Store, res store.Resource, namespace, name string, precond *store.Preconditions, mutate store.UpdateFunc) (store.Object, error) {
	return r.GuaranteedUpdateSubresource(ctx, st, res, "status", namespace, name, precond, mutate)
}

// GuaranteedUpdateSubresource is GuaranteedUpdate of subresource sub
// ("status", "finalize"; "" is the main resource), with that
// subresource's rules (PrepareUpdate). A subresource the kind does not
// have is a 404.
func (r *Registry) GuaranteedUpdateSubresource(ctx context.Context, st *store.Store, res store.Resource, sub, namespace, name string, precond *store.Preconditions, mutate store.UpdateFunc) (store.Object, error) {
	k, err := r.Kind(res)
	if err != nil {
		return nil, err
	}
	out, err := st.GuaranteedUpdate(ctx, res, namespace, name, precond, func(cur store.Object) (store.Object, error) {
		old := cur.DeepCopyObject().(store.Object)
		obj, err := mutate(cur)
		if err != nil {
			return nil, err
		}
		if err := r.AdmitMutating(ctx, AdmissionAttributes{Operation: admissionv1.Update, Resource: res, Subresource: sub, Object: obj, OldObject: old}); err != nil {
			return nil, err
		}
		obj, err = BeforeUpdate(k, sub, obj, old)
		if err != nil {
			return nil, err
		}
		if err := r.Admit(ctx, AdmissionAttributes{Operation: admissionv1.Update, Resource: res, Subresource: sub, Object: obj, OldObject: old}); err != nil {
			return nil, err
		}
		return obj, nil
	})
	if err != nil {
		return nil, err
	}
	if ShouldDeleteDuringUpdate(k, out) {
		if _, err := st.Delete(ctx, res, namespace, name, out.GetResourceVersion()); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return nil, err // a conflict: someone wrote meanwhile, their write decides
		}
	}
	return out, nil
}
