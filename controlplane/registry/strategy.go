package registry

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"

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
		if typed, ok := mergeTyped(k, sub, obj, old, typedPrepare); ok {
			obj = typed
		} else {
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
	}
	if k.Default != nil {
		k.Default(obj)
	}
	if k.AfterUpdateMerge != nil {
		k.AfterUpdateMerge(obj, old)
	}
	gen := old.GetGeneration()
	if k.Generation && specChanged(obj, old, typedPrepare) {
		gen++
	}
	obj.SetGeneration(gen)
	return obj, nil
}

// typedPrepare makes PrepareUpdate keep or take the status on the typed
// objects (mergeTyped) and compare specs field by field (specChanged)
// instead of through JSON maps; false only in tests, to compare the two.
var typedPrepare = true

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

// specChanged reports whether anything but metadata and status differs
// in their JSON. With typed, fields of a Go struct kind that are
// reflect.DeepEqual (so encode alike) are not encoded to be compared.
func specChanged(obj, old store.Object, typed bool) bool {
	if l := layoutOf(obj); typed && l != nil && reflect.TypeOf(old) == reflect.TypeOf(obj) {
		nv, ov := reflect.ValueOf(obj).Elem(), reflect.ValueOf(old).Elem()
		same := true
		for _, i := range l.spec {
			if !reflect.DeepEqual(nv.Field(i).Interface(), ov.Field(i).Interface()) {
				same = false
				break
			}
		}
		if same {
			return false
		}
	}
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

// structLayout is where a Go struct kind keeps its top-level JSON fields.
type structLayout struct {
	meta   int   // index of the metadata field (metav1.ObjectMeta)
	status int   // index of the status field; -1 without one
	spec   []int // every other field but the inline TypeMeta
	// copyStatus deep-copies the status field's value (its type's
	// generated DeepCopyInto or DeepCopy).
	copyStatus func(reflect.Value) reflect.Value
}

var (
	layouts       sync.Map // reflect.Type -> *structLayout (nil: not a kind mergeTyped handles)
	typeMetaType  = reflect.TypeFor[metav1.TypeMeta]()
	objectMetaTyp = reflect.TypeFor[metav1.ObjectMeta]()
)

// layoutOf returns the layout of obj's Go struct, or nil when obj is not
// a pointer to a struct whose exported fields are all named JSON fields
// (apart from an inline metav1.TypeMeta), with a metav1.ObjectMeta
// "metadata" and a "status" that has generated deep-copy functions (or
// none): unstructured objects, and anything unusual, take the JSON path.
func layoutOf(obj store.Object) *structLayout {
	t := reflect.TypeOf(obj)
	if l, ok := layouts.Load(t); ok {
		return l.(*structLayout)
	}
	l := buildLayout(t)
	layouts.Store(t, l)
	return l
}

func buildLayout(t reflect.Type) *structLayout {
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	st := t.Elem()
	l := &structLayout{meta: -1, status: -1}
	for i := range st.NumField() {
		f := st.Field(i)
		if !f.IsExported() {
			return nil // the JSON path would drop it
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && name == "" && f.Type == typeMetaType: // inline apiVersion and kind
		case f.Anonymous && name != "metadata":
			return nil
		case name == "" || name == "-":
			return nil
		case name == "metadata":
			if f.Type != objectMetaTyp {
				return nil
			}
			l.meta = i
		case name == "status":
			l.status = i
			if l.copyStatus = deepCopier(f.Type); l.copyStatus == nil {
				return nil
			}
		default:
			l.spec = append(l.spec, i)
		}
	}
	if l.meta < 0 {
		return nil
	}
	return l
}

// deepCopier returns a deep copy function for values of t from its
// generated DeepCopyInto (a struct) or DeepCopy (a pointer), nil when it
// has neither.
func deepCopier(t reflect.Type) func(reflect.Value) reflect.Value {
	switch t.Kind() {
	case reflect.Struct:
		m, ok := reflect.PointerTo(t).MethodByName("DeepCopyInto")
		if !ok || m.Type.NumIn() != 2 || m.Type.In(1) != reflect.PointerTo(t) {
			return nil
		}
		return func(v reflect.Value) reflect.Value {
			in := reflect.New(t)
			in.Elem().Set(v)
			out := reflect.New(t)
			m.Func.Call([]reflect.Value{in, out})
			return out.Elem()
		}
	case reflect.Pointer:
		m, ok := t.MethodByName("DeepCopy")
		if !ok || m.Type.NumOut() != 1 || m.Type.Out(0) != t {
			return nil
		}
		return func(v reflect.Value) reflect.Value {
			if v.IsNil() {
				return reflect.Zero(t)
			}
			return m.Func.Call([]reflect.Value{v})[0]
		}
	}
	return nil
}

// mergeTyped is PrepareUpdate's status rule on Go struct objects instead
// of JSON maps: the main resource of a kind with Status gets old's status
// (keepStatus), the status subresource is old with obj's metadata and
// status (onlyStatus). obj and old are values
// decoded from JSON, so what the JSON round trip would have normalized
// (empty lists and maps of omitempty fields, time precision) is already
// so; TestPrepareUpdateTyped compares both ways on random objects. ok is
// false for any other rule and for objects layoutOf does not handle.
func mergeTyped(k *Kind, sub string, obj, old store.Object, enabled bool) (store.Object, bool) {
	if !enabled || !k.Status || (sub != "" && sub != "status") {
		return nil, false
	}
	l := layoutOf(obj)
	if l == nil || reflect.TypeOf(old) != reflect.TypeOf(obj) {
		return nil, false
	}
	nv, ov := reflect.ValueOf(obj).Elem(), reflect.ValueOf(old).Elem()
	if sub == "" { // keepStatus
		if l.status >= 0 {
			nv.Field(l.status).Set(l.copyStatus(ov.Field(l.status)))
		}
		obj.GetObjectKind().SetGroupVersionKind(k.GroupVersionKind())
		return obj, true
	}
	// onlyStatus. Its map version reads the stored ownerReferences after
	// it replaced the stored metadata with the new one, so the new
	// ownerReferences stay; so they do here (a status write that changes
	// them changes them, unlike Kubernetes' status strategies).
	out := old.DeepCopyObject().(store.Object)
	outv := reflect.ValueOf(out).Elem()
	outv.Field(l.meta).Set(nv.Field(l.meta))
	if l.status >= 0 {
		outv.Field(l.status).Set(nv.Field(l.status))
	}
	out.GetObjectKind().SetGroupVersionKind(k.GroupVersionKind())
	return out, true
}
