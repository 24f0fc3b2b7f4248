package registry

import (
	"context"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/orca-edge/orca/controlplane/store"
)

// AdmissionAttributes describe one write to validating admission.
type AdmissionAttributes struct {
	// Operation is admissionv1.Create or admissionv1.Update.
	Operation admissionv1.Operation
	// Resource is the kind's store resource; Subresource "" for the main
	// resource ("status", "ephemeralcontainers", ...).
	Resource    store.Resource
	Subresource string
	// Object is the object to store, after the kind's rules (defaults,
	// validation); OldObject the stored one on Update. Read-only.
	Object, OldObject store.Object
}

// ValidatingAdmission is a validating admission plugin (Kubernetes'
// admission.ValidationInterface): it sees every create and update after
// the kind's own rules and before the store, whether the write comes
// through the API or from a controller (Registry.Create,
// GuaranteedUpdate), as in Kubernetes, where controllers write through
// the API. Its error rejects the write as it is (use a StatusError: 403,
// 422, ...). The request's user, when there is one, is in ctx
// (k8s.io/apiserver/pkg/endpoints/request.UserFrom); warnings go to
// k8s.io/apiserver/pkg/warning.AddWarning(ctx, ...).
type ValidatingAdmission func(ctx context.Context, a AdmissionAttributes) error

// SetValidatingAdmission installs plugin under name, replacing one of the
// same name (nil removes it). Plugins run in the order first installed.
func (r *Registry) SetValidatingAdmission(name string, plugin ValidatingAdmission) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.admission = setNamed(r.admission, name, plugin)
}

// Admit runs the validating admission plugins on a; the first error
// rejects the write.
func (r *Registry) Admit(ctx context.Context, a AdmissionAttributes) error {
	r.mu.RLock()
	plugins := r.admission
	r.mu.RUnlock()
	for _, p := range plugins {
		if err := p.f(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

type namedAdmission struct {
	name string
	f    ValidatingAdmission
}

// MutatingAdmission is a mutating admission plugin (Kubernetes'
// admission.MutationInterface): it sees every create and update before
// the kind's defaults and validation, whether the write comes through the
// API or from a controller (Registry.Create, GuaranteedUpdate), and may
// change a.Object in place (a.OldObject is read-only). Its error rejects
// the write as it is (a StatusError: 403, 422, ...). Mutating plugins all
// run before any validating one, as in Kubernetes.
type MutatingAdmission func(ctx context.Context, a AdmissionAttributes) error

// SetMutatingAdmission installs plugin under name, replacing one of the
// same name (nil removes it). Plugins run in the order first installed.
func (r *Registry) SetMutatingAdmission(name string, plugin MutatingAdmission) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mutating = setNamed(r.mutating, name, ValidatingAdmission(plugin))
}

// AdmitMutating runs the mutating admission plugins on a; the first error
// rejects the write.
func (r *Registry) AdmitMutating(ctx context.Context, a AdmissionAttributes) error {
	r.mu.RLock()
	plugins := r.mutating
	r.mu.RUnlock()
	for _, p := range plugins {
		if err := p.f(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// setNamed returns list with plugin installed under name: replacing the
// one of that name, removing it when plugin is nil, else appended. The
// list given is never modified (readers hold it without the lock).
func setNamed(list []namedAdmission, name string, plugin ValidatingAdmission) []namedAdmission {
	for i, p := range list {
		if p.name == name {
			out := slices.Clone(list)
			if plugin == nil {
				return slices.Delete(out, i, i+1)
			}
			out[i].f = plugin
			return out
		}
	}
	if plugin == nil {
		return list
	}
	return append(slices.Clip(list), namedAdmission{name, plugin})
}
