package ctrlutil

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

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
