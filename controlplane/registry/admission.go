package registry

import (
	"context"

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
	for i, p := range r.admission {
		if p.name == name {
			if plugin == nil {
				r.admission = append(r.admission[:i:i], r.admission[i+1:]...)
			} else {
				r.admission[i].f = plugin
			}
			return
		}
	}
	if plugin != nil {
		r.admission = append(r.admission, namedAdmission{name, plugin})
	}
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
