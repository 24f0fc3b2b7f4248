package registry

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/uuid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/store"
)

// MaxValidationErrors bounds the field errors one Invalid Status lists:
// its message joins them all (quadratically, in apimachinery's
// aggregate), so a body wrong in thousands of places would otherwise cost
// minutes of CPU.
const MaxValidationErrors = 100

// Invalid is the 422 Invalid Status for errs on the object name of k,
// listing at most MaxValidationErrors of them and the count of the rest.
func Invalid(k *Kind, name string, errs field.ErrorList) error {
	if n := len(errs); n > MaxValidationErrors {
		errs = append(errs[:MaxValidationErrors:MaxValidationErrors],
			&field.Error{Type: field.ErrorTypeTooMany, Field: "<object>", BadValue: n, Detail: fmt.Sprintf("%d more errors are not listed", n-MaxValidationErrors)})
	}
	return apierrors.NewInvalid(k.GroupVersionKind().GroupKind(), name, errs)
}

// maxGeneratedNameLength is the longest prefix kept from generateName:
// names are at most 63 characters and 5 random ones are appended.
const maxGeneratedNameLength = 63 - 5

// GenerateName returns base followed by 5 random lowercase alphanumerics,
// base cut to 58 characters first, as the apiserver's SimpleNameGenerator.
func GenerateName(base string) string {
	if len(base) > maxGeneratedNameLength {
		base = base[:maxGeneratedNameLength]
	}
	return base + utilrand.String(5)
}

// PrepareCreate sets what the server owns on a new object, as the
// Kubernetes apiserver's BeforeCreate: a new uid (random UUID),
// creationTimestamp now, generation 1 for a kind with Generation (none
// for the others, as in Kubernetes), a generated name when name is
// empty and generateName set; resourceVersion and deletion fields
// cleared; namespace cleared for a cluster-scoped kind. Then the kind's
// PrepareForCreate and Default. managedFields stay as set: the
// apiserver's field manager maintains them (as with server-side apply
// enabled in Kubernetes).
func PrepareCreate(k *Kind, obj store.Object) {
	if !k.Namespaced {
		obj.SetNamespace("")
	}
	if obj.GetName() == "" && obj.GetGenerateName() != "" {
		obj.SetName(GenerateName(obj.GetGenerateName()))
	}
	obj.SetUID(types.UID(uuid.NewString()))
	obj.SetCreationTimestamp(metav1.Now())
	obj.SetGeneration(0)
	if k.Generation {
		obj.SetGeneration(1)
	}
	obj.SetResourceVersion("")
	obj.SetDeletionTimestamp(nil)
	obj.SetDeletionGracePeriodSeconds(nil)
	if k.PrepareForCreate != nil {
		k.PrepareForCreate(obj)
	}
	if k.Default != nil {
		k.Default(obj)
	}
}

// ValidateCreate checks obj as a new object of k: metadata
// (apimachinery's ValidateObjectMeta: name by NameValidation, namespace
// required iff namespaced, labels, annotations, owner references,
// finalizers) and the kind's Validate. It returns the 422 Invalid Status
// (see Invalid) or nil.
func ValidateCreate(k *Kind, obj store.Object) error {
	if errs := validateCreate(k, obj); len(errs) > 0 {
		return Invalid(k, obj.GetName(), errs)
	}
	return nil
}

func validateCreate(k *Kind, obj store.Object) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaAccessor(obj, k.Namespaced, k.nameValidation(), field.NewPath("metadata"))
	if k.Validate != nil {
		errs = append(errs, k.Validate(obj)...)
	}
	return errs
}

// BeforeCreate is PrepareCreate then ValidateCreate: what every create of
// an object of k goes through, at the API and in the controllers.
func BeforeCreate(k *Kind, obj store.Object) error {
	PrepareCreate(k, obj)
	return ValidateCreate(k, obj)
}

// KeepSystemMeta copies the server-owned metadata of old into obj: uid,
// creationTimestamp, deletionTimestamp, deletionGracePeriodSeconds,
// namespace, generateName when obj has none. managedFields stay as obj
// has them (the apiserver's field manager maintains them; a writer that
// copied the stored object keeps them).
func KeepSystemMeta(obj, old metav1.Object) {
	obj.SetUID(old.GetUID())
	obj.SetCreationTimestamp(old.GetCreationTimestamp())
	obj.SetDeletionTimestamp(old.GetDeletionTimestamp())
	obj.SetDeletionGracePeriodSeconds(old.GetDeletionGracePeriodSeconds())
	obj.SetNamespace(old.GetNamespace())
	if obj.GetGenerateName() == "" {
		obj.SetGenerateName(old.GetGenerateName())
	}
}

// PrepareUpdate applies the update rules of Kubernetes' registries to
// obj, the new version of old (the stored object, not modified), for a
// write of the main resource (sub "") or of subresource sub:
//   - server-owned metadata stays as stored (KeepSystemMeta);
//   - the kind's PrepareForUpdate;
//   - with Status, the main resource keeps the stored status, and
//     "status" changes only status and metadata (ownerReferences stay);
//   - a subresource with Update keeps what its Update returns;
//   - Default, then metadata.generation: the stored one, plus one when
//     Generation is set and anything but metadata and status changed.
//
// It returns the object to validate and store (obj itself or a new one).
// A subresource k does not have is a 404.
func PrepareUpdate(k *Kind, sub string, obj, old store.Object) (store.Object, error) {
	KeepSystemMeta(obj, old)
	if k.PrepareForUpdate != nil {
		k.PrepareForUpdate(obj, old)
	}
	var merge func(nm, om map[string]any) map[string]any
	switch {
	case sub == "" && k.Status:
		merge = keepStatus
	case sub == "status" && k.Status:
		merge = onlyStatus
	case sub == "":
	default:
		s, ok := k.Subresource(sub)
		if !ok || s.Update == nil {
			return nil, apierrors.NewNotFound(k.GroupResource(), obj.GetName()+"/"+sub)
		}
		merge = s.Update
	}
	if merge != nil {
		nm, err := toMap(obj)
		if err != nil {
			return nil, err
		}
		om, err := toMap(old)
		if err != nil {
			return nil, err
		}
		if obj, err = fromMap(k, merge(nm, om)); err != nil {
			return nil, err
		}
	}
	if k.Default != nil {
		k.Default(obj)
	}
	gen := old.GetGeneration()
	if k.Generation && specChanged(obj, old) {
		gen++
	}
	obj.SetGeneration(gen)
	return obj, nil
}

// ValidateUpdate checks obj as the update of old: metadata
// (ValidateObjectMetaAccessorUpdate and ValidateObjectMeta), the kind's
// Validate and ValidateUpdate. It returns the 422 Invalid Status or nil.
func ValidateUpdate(k *Kind, obj, old store.Object) error {
	errs := apivalidation.ValidateObjectMetaAccessorUpdate(obj, old, field.NewPath("metadata"))
	errs = append(errs, validateCreate(k, obj)...)
	if k.ValidateUpdate != nil {
		errs = append(errs, k.ValidateUpdate(obj, old)...)
	}
	if len(errs) > 0 {
		return Invalid(k, obj.GetName(), errs)
	}
	return nil
}

// BeforeUpdate is PrepareUpdate then ValidateUpdate: what every update
// of an object of k goes through, at the API and in the controllers.
func BeforeUpdate(k *Kind, sub string, obj, old store.Object) (store.Object, error) {
	obj, err := PrepareUpdate(k, sub, obj, old)
	if err != nil {
		return nil, err
	}
	return obj, ValidateUpdate(k, obj, old)
}

// keepStatus is the main resource's rule of a kind with a status
// subresource: the stored status stays.
func keepStatus(nm, om map[string]any) map[string]any {
	if st, ok := om["status"]; ok {
		nm["status"] = st
	} else {
		delete(nm, "status")
	}
	return nm
}

// onlyStatus is the status subresource's rule: the stored object with
// the new status and metadata, less a change of ownerReferences.
func onlyStatus(nm, om map[string]any) map[string]any {
	out := om
	out["metadata"] = nm["metadata"]
	if md, ok := out["metadata"].(map[string]any); ok {
		omd, _ := om["metadata"].(map[string]any)
		if refs, ok := omd["ownerReferences"]; ok {
			md["ownerReferences"] = refs
		} else {
			delete(md, "ownerReferences")
		}
	}
	if st, ok := nm["status"]; ok {
		out["status"] = st
	} else {
		delete(out, "status")
	}
	return out
}

// specChanged reports whether anything but metadata and status differs.
func specChanged(obj, old store.Object) bool {
	nm, _ := toMap(obj)
	om, _ := toMap(old)
	for _, m := range []map[string]any{nm, om} {
		delete(m, "metadata")
		delete(m, "status")
		delete(m, "apiVersion")
		delete(m, "kind")
	}
	return !reflect.DeepEqual(nm, om)
}

func toMap(obj any) (map[string]any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return m, nil
}

func fromMap(k *Kind, m map[string]any) (store.Object, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	obj := k.New()
	if err := json.Unmarshal(b, obj); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("decode %s: %v", k.Kind, err))
	}
	obj.GetObjectKind().SetGroupVersionKind(k.GroupVersionKind())
	return obj, nil
}
