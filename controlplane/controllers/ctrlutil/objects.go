package ctrlutil

import (
	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
)

// maxGeneratedNameLength is the longest prefix kept from generateName, as
// apiserver's SimpleNameGenerator (names are at most 63 characters, and 5
// random characters are appended).
const maxGeneratedNameLength = 63 - 5

// GenerateName returns base followed by 5 random lowercase alphanumerics,
// base truncated to 58 characters, as the apiserver's SimpleNameGenerator.
func GenerateName(base string) string {
	if len(base) > maxGeneratedNameLength {
		base = base[:maxGeneratedNameLength]
	}
	return base + utilrand.String(5)
}

// PrepareCreate sets the metadata the apiserver sets on create, for objects
// a controller writes straight into the store: a new uid (random UUID),
// creationTimestamp now, generation 1, and, when name is empty and
// generateName is set, a generated name. It clears resourceVersion and
// deletion fields.
func PrepareCreate(obj metav1.Object) {
	if obj.GetName() == "" && obj.GetGenerateName() != "" {
		obj.SetName(GenerateName(obj.GetGenerateName()))
	}
	obj.SetUID(types.UID(uuid.NewString()))
	obj.SetCreationTimestamp(metav1.Now())
	obj.SetGeneration(1)
	obj.SetResourceVersion("")
	obj.SetDeletionTimestamp(nil)
	obj.SetDeletionGracePeriodSeconds(nil)
}

// HasFinalizer reports whether obj carries finalizer f.
func HasFinalizer(obj metav1.Object, f string) bool {
	for _, x := range obj.GetFinalizers() {
		if x == f {
			return true
		}
	}
	return false
}

// RemoveFinalizer removes f from obj and reports whether it was there.
func RemoveFinalizer(obj metav1.Object, f string) bool {
	fs := obj.GetFinalizers()
	out := fs[:0:0]
	for _, x := range fs {
		if x != f {
			out = append(out, x)
		}
	}
	if len(out) == len(fs) {
		return false
	}
	if len(out) == 0 {
		out = nil
	}
	obj.SetFinalizers(out)
	return true
}

// RemoveOwnerReference removes every ownerReference with uid from obj and
// reports whether one was removed.
func RemoveOwnerReference(obj metav1.Object, uid types.UID) bool {
	refs := obj.GetOwnerReferences()
	out := refs[:0:0]
	for _, r := range refs {
		if r.UID != uid {
			out = append(out, r)
		}
	}
	if len(out) == len(refs) {
		return false
	}
	if len(out) == 0 {
		out = nil
	}
	obj.SetOwnerReferences(out)
	return true
}
