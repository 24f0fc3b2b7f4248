package apiserver

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/schemaconv"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	"sigs.k8s.io/structured-merge-diff/v6/value"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// metadata.managedFields, as the Kubernetes apiserver keeps them: every
// write through the API (create, update, each patch type, server-side
// apply, the status and scale subresources, dry runs included) runs the
// kind's managedfields.FieldManager (k8s.io/apimachinery/pkg/util/
// managedfields over sigs.k8s.io/structured-merge-diff/v6), which records
// which manager owns which field, with operation Update or Apply, the
// apiVersion, the subresource and the time of its last change:
//
//   - the manager is ?fieldManager= or else the User-Agent up to its first
//     "/" (kubectl sends kubectl-create, kubectl-client-side-apply,
//     kubectl-edit, kubectl-patch, ...; client-go programs are named by
//     their binary), as the apiserver's managerOrUserAgent; a fieldManager
//     longer than 128 bytes or with unprintable characters is a 422;
//   - managedFields sent on create, update or patch are kept when they
//     decode (a client may edit them) and replaced by the stored ones when
//     they do not or are absent; an empty list (or one empty entry) resets
//     them, after which an update records nothing until the next apply
//     (the FieldManager's skip-non-applied rule). A subresource write
//     ignores sent managedFields;
//   - at most 10 Update managers are kept; older ones are merged into one
//     "ancient-changes" entry (managedfields' capManagers).
//
// The field managers of built-in kinds are built from the same generated
// OpenAPI definitions /openapi/v3 serves (openapidefs), as
// kube-apiserver's; a kind may bring its own schema
// (registry.Kind.TypeConverter: custom resources, from their CRD), and an
// unstructured kind without one gets managedfields' deduced one (every
// field atomic). Writes that controllers make to the store directly (not
// through the API) leave managedFields as they are.

// fieldKey names the field manager of one kind and subresource.
type fieldKey struct {
	gvk         schema.GroupVersionKind
	subresource string
}

// fieldManagers builds and caches the managedfields.FieldManager of each
// kind and subresource the server writes, for the kinds of reg. Safe for
// concurrent use.
type fieldManagers struct {
	reg *registry.Registry

	mu sync.Mutex // guards the fields below
	// typed is the type converter of reg's kinds with generated OpenAPI
	// definitions, built on first use (about 20 ms) from the models
	// openAPIKinds lists, as kube-apiserver builds its own from its
	// static OpenAPI spec; nil until then and after reg changed.
	typed   *structTypeConverter
	changed <-chan struct{}                          // closed when reg changed since the cache was filled
	cache   map[fieldKey]*managedfields.FieldManager // nil value: the kind has no schema
}

func newFieldManagers(reg *registry.Registry) *fieldManagers {
	return &fieldManagers{reg: reg, changed: reg.Changed(), cache: map[fieldKey]*managedfields.FieldManager{}}
}

// get returns the field manager of k's objects written through
// subresource ("", "status", "scale", "finalize"), or nil when k has no
// schema orca knows (its managedFields are then dropped).
func (f *fieldManagers) get(k *registry.Kind, subresource string) *managedfields.FieldManager {
	key := fieldKey{k.GroupVersionKind(), subresource}
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.changed: // a kind was added or removed: start over
		f.changed, f.typed, f.cache = f.reg.Changed(), nil, map[fieldKey]*managedfields.FieldManager{}
	default:
	}
	if fm, ok := f.cache[key]; ok {
		return fm
	}
	fm, err := f.build(k, subresource)
	if err != nil {
		fm = nil
	}
	f.cache[key] = fm
	return fm
}

// build makes the field manager of k and subresource; f.mu must be held.
func (f *fieldManagers) build(k *registry.Kind, subresource string) (*managedfields.FieldManager, error) {
	gvk := k.GroupVersionKind()
	_, unstructuredKind := k.New().(runtime.Unstructured)
	conv := objectConvertor{r: k.Resource, gvk: gvk, unstructured: unstructuredKind}
	reset := resetFields(k, subresource)
	tc := k.TypeConverter
	if unstructuredKind {
		if tc == nil {
			tc = managedfields.NewDeducedTypeConverter()
		}
		return managedfields.NewDefaultCRDFieldManager(tc, conv, noDefaults{}, conv, gvk, gvk.GroupVersion(), subresource, reset)
	}
	if tc == nil {
		if f.typed == nil {
			models, err := openAPIModels(f.reg)
			if err != nil {
				return nil, err
			}
			if f.typed, err = newStructTypeConverter(models); err != nil {
				return nil, err
			}
		}
		tc = f.typed
	}
	if _, err := tc.ObjectToTyped(conv.newObject()); err != nil {
		return nil, err // the kind is not in the definitions
	}
	return managedfields.NewDefaultFieldManager(tc, conv, noDefaults{}, conv, gvk, gvk.GroupVersion(), subresource, reset)
}

// openAPIModels returns the OpenAPI v3 schemas of reg's kinds with
// generated definitions and of what they reference, by definition name.
func openAPIModels(reg *registry.Registry) (map[string]*spec.Schema, error) {
	kinds := openAPIKinds(reg)
	c := openAPIConfig(kinds)
	names := make([]string, 0, len(kinds))
	for _, k := range kinds {
		names = append(names, k.model)
	}
	return builder3.BuildOpenAPIDefinitionsForResources(&common.OpenAPIV3Config{
		Info: c.Info, GetDefinitions: c.GetDefinitions, GetDefinitionName: c.GetDefinitionName,
	}, names...)
}

// resetFields are the fields a write through subresource does not own
// because the strategy resets them (registry.PrepareUpdate), as the Kubernetes
// strategies' GetResetFields: the main resource of a kind with a status
// subresource keeps the stored status; the status subresource keeps spec
// and metadata.ownerReferences; namespaces/finalize changes only
// spec.finalizers, so it owns nothing else. Nil: none.
func resetFields(k *registry.Kind, subresource string) map[fieldpath.APIVersion]fieldpath.Filter {
	var filter fieldpath.Filter
	switch {
	case subresource == "" && k.Status:
		filter = fieldpath.NewExcludeSetFilter(fieldpath.NewSet(fieldpath.MakePathOrDie("status")))
	case subresource == "status":
		filter = fieldpath.NewExcludeSetFilter(fieldpath.NewSet(fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("metadata", "ownerReferences")))
	case subresource == "finalize":
		filter = fieldpath.NewIncludeMatcherFilter(fieldpath.MakePrefixMatcherOrDie("spec", "finalizers"))
	default:
		return nil
	}
	return map[fieldpath.APIVersion]fieldpath.Filter{fieldpath.APIVersion(k.APIVersion()): filter}
}

// objectConvertor is the runtime.ObjectConvertor and runtime.ObjectCreater
// of one kind served at one version (orca serves no other version of any
// kind, so the hub is that version): conversion to it is the identity, and
// an unstructured object becomes the kind's Go type (kept unstructured
// for unstructured kinds). Any other version is not registered, which the
// field manager takes as "drop the managers of that version".
type objectConvertor struct {
	r   store.Resource
	gvk schema.GroupVersionKind
	// unstructured is whether r's objects are unstructured (r.New()'s
	// type), known once rather than by a new object per conversion.
	unstructured bool
}

func (c objectConvertor) newObject() store.Object {
	obj := c.r.New()
	obj.GetObjectKind().SetGroupVersionKind(c.gvk)
	return obj
}

// New implements runtime.ObjectCreater.
func (c objectConvertor) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	if gvk != c.gvk {
		return nil, runtime.NewNotRegisteredErrForKind("orca", gvk)
	}
	return c.newObject(), nil
}

// Convert implements runtime.ObjectConvertor; the field manager does not use it.
func (c objectConvertor) Convert(in, out, _ any) error {
	return fmt.Errorf("convert %T to %T: not supported", in, out)
}

// ConvertFieldLabel implements runtime.ObjectConvertor.
func (c objectConvertor) ConvertFieldLabel(_ schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}

// ConvertToVersion implements runtime.ObjectConvertor.
func (c objectConvertor) ConvertToVersion(in runtime.Object, target runtime.GroupVersioner) (runtime.Object, error) {
	if gvk, ok := target.KindForGroupVersionKinds([]schema.GroupVersionKind{c.gvk}); !ok || gvk != c.gvk {
		return nil, runtime.NewNotRegisteredGVKErrForTarget("orca", in.GetObjectKind().GroupVersionKind(), target)
	}
	if got := in.GetObjectKind().GroupVersionKind(); !got.Empty() && got != c.gvk {
		return nil, runtime.NewNotRegisteredErrForKind("orca", got)
	}
	u, isUnstructured := in.(runtime.Unstructured)
	if !isUnstructured || c.unstructured {
		in.GetObjectKind().SetGroupVersionKind(c.gvk)
		return in, nil
	}
	out := c.r.New()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), out); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("decode %s: %v", c.r.Kind, err))
	}
	out.GetObjectKind().SetGroupVersionKind(c.gvk)
	return out, nil
}

// structTypeConverter is managedfields.NewTypeConverter's type converter
// of the generated definitions, except that ObjectToTyped does not
// validate a Go struct object when the field manager allows duplicates
// (its update path, for the new and the live object, and the live object
// of an apply): such an object conforms to the schema by construction
// (the definitions are generated from the same Go types) and duplicates
// are allowed, so the validation walk (a fifth of the field manager's
// allocations) can only say yes. Unstructured objects (apply patches)
// and calls that do not allow duplicates are validated as before.
type structTypeConverter struct {
	managedfields.TypeConverter                                                  // the validating converter
	parsers                     map[schema.GroupVersionKind]*typed.ParseableType // by the models' x-kubernetes-group-version-kind
}

func newStructTypeConverter(models map[string]*spec.Schema) (*structTypeConverter, error) {
	tc, err := managedfields.NewTypeConverter(models, false)
	if err != nil {
		return nil, err
	}
	ts, err := schemaconv.ToSchemaFromOpenAPI(models, false)
	if err != nil {
		return nil, fmt.Errorf("failed to convert models to schema: %v", err)
	}
	parser := &typed.Parser{Schema: smdschema.Schema{Types: ts.Types}}
	c := &structTypeConverter{TypeConverter: tc, parsers: map[schema.GroupVersionKind]*typed.ParseableType{}}
	for name, model := range models {
		gvks, _ := model.Extensions["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			m, _ := g.(map[string]any)
			group, _ := m["group"].(string)
			version, _ := m["version"].(string)
			kind, _ := m["kind"].(string)
			if version == "" || kind == "" {
				continue
			}
			t := parser.Type(name)
			c.parsers[schema.GroupVersionKind{Group: group, Version: version, Kind: kind}] = &t
		}
	}
	return c, nil
}

// ObjectToTyped implements managedfields.TypeConverter as managedfields'
// own converter does (every typed value on the same schema, which merges
// require), except for the validation above.
func (c *structTypeConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	t := c.parsers[obj.GetObjectKind().GroupVersionKind()]
	if t == nil {
		return c.TypeConverter.ObjectToTyped(obj, opts...) // its "no corresponding type" error
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return t.FromUnstructured(u.UnstructuredContent(), opts...)
	}
	if !slices.Contains(opts, typed.AllowDuplicates) {
		return t.FromStructured(obj, opts...)
	}
	v, err := value.NewValueReflect(obj)
	if err != nil {
		return nil, fmt.Errorf("error creating struct value reflector: %v", err)
	}
	return typed.AsTypedUnvalidated(v, t.Schema, t.TypeRef), nil
}

// TypedToObject implements managedfields.TypeConverter as managedfields'
// own converter does: the value as an unstructured object.
func (c *structTypeConverter) TypedToObject(tv *typed.TypedValue) (runtime.Object, error) {
	u := tv.AsValue().Unstructured()
	m, ok := u.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("failed to convert value to unstructured for type %T", u)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// noDefaults is the field manager's defaulter: the kind's defaults are
// applied to what apply merged by registry.PrepareCreate and
// PrepareUpdate, on the object's way to the store.
type noDefaults struct{}

func (noDefaults) Default(runtime.Object) {}

// writer is who makes a write and how, carried in the request's context
// from dispatch to createObject and updateObject.
type writer struct {
	// manager is the field manager (managerOrUserAgent).
	manager string
	// subresource is the path's subresource ("": the main resource).
	subresource string
	// force is ?force=true of an apply patch: take the conflicting fields.
	force bool
	// applied means the object already carries the managedFields of a
	// server-side apply (apply.go): nothing more to record.
	applied bool
}

type writerKey struct{}

// withWriter returns ctx carrying w.
func withWriter(ctx context.Context, w writer) context.Context {
	return context.WithValue(ctx, writerKey{}, w)
}

// writerOf returns the writer in ctx; without one (the server's own
// bootstrap writes) the manager is "orca-server".
func writerOf(ctx context.Context) writer {
	if w, ok := ctx.Value(writerKey{}).(writer); ok {
		return w
	}
	return writer{manager: "orca-server"}
}

// managerOrUserAgent returns the field manager of a request: manager
// (?fieldManager=) when set, else the User-Agent's printable characters
// before its first "/", cut to 128 bytes, as the Kubernetes apiserver's
// managerOrUserAgent and prefixFromUserAgent
// (k8s.io/apiserver/pkg/endpoints/handlers/rest.go).
func managerOrUserAgent(manager, userAgent string) string {
	if manager != "" {
		return manager
	}
	var buf bytes.Buffer
	for _, r := range strings.Split(userAgent, "/")[0] {
		if !unicode.IsPrint(r) {
			continue
		}
		if buf.Len()+utf8.RuneLen(r) > metav1validation.FieldManagerMaxLength {
			break
		}
		buf.WriteRune(r)
	}
	return buf.String()
}

// checkWriteOptions checks the field-management options of a write, as
// metav1validation.ValidateCreateOptions / ValidateUpdateOptions /
// ValidatePatchOptions: a fieldManager of at most 128 printable bytes;
// force only on an apply patch; apply needs a fieldManager. A failure is
// a 422 Invalid on CreateOptions, UpdateOptions or PatchOptions, with
// Kubernetes' messages ("fieldManager: Required value: is required for
// apply patch"). force must be "true" or "false" (400 otherwise).
func checkWriteOptions(method string, apply bool, fieldManager string, q map[string][]string) (force bool, err error) {
	var errs field.ErrorList
	kind := "CreateOptions"
	switch method {
	case http.MethodPut:
		kind = "UpdateOptions"
	case http.MethodPatch:
		kind = "PatchOptions"
	}
	if v, ok := q["force"]; ok && method == http.MethodPatch {
		switch strings.ToLower(v[0]) {
		case "true", "1":
			force = true
		case "false", "0", "":
		default:
			return false, apierrors.NewBadRequest(fmt.Sprintf("force %q is not a boolean", v[0]))
		}
		if !apply {
			errs = append(errs, field.Forbidden(field.NewPath("force"), "may not be specified for non-apply patch"))
		}
	}
	if apply && fieldManager == "" {
		// kubectl defaults it to "kubectl"; controllers must set it.
		errs = append(errs, field.Required(field.NewPath("fieldManager"), "is required for apply patch"))
	}
	errs = append(errs, metav1validation.ValidateFieldManager(fieldManager, field.NewPath("fieldManager"))...)
	if len(errs) > 0 {
		return false, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: kind}, "", errs)
	}
	return force, nil
}

// trackCreate records the creating manager's fields in obj's
// managedFields (managedFields sent with obj are kept when they decode),
// as the create handler's FieldManager.UpdateNoErrors against an empty
// object. It leaves what apply recorded.
func (s *Server) trackCreate(ctx context.Context, k *registry.Kind, obj store.Object) store.Object {
	w := writerOf(ctx)
	if w.applied {
		return obj
	}
	fm := s.fields.get(k, "")
	if fm == nil {
		obj.SetManagedFields(nil)
		return obj
	}
	live := objectConvertor{r: k.Resource, gvk: k.GroupVersionKind()}.newObject()
	return s.trackWith(fm, live, obj, w.manager)
}

// trackUpdate records the writing manager's changes from cur to obj in
// obj's managedFields, as the update and patch handlers'
// FieldManager.UpdateNoErrors. It leaves what apply recorded.
func (s *Server) trackUpdate(ctx context.Context, k *registry.Kind, cur, obj store.Object) store.Object {
	w := writerOf(ctx)
	if w.applied {
		return obj
	}
	fm := s.fields.get(k, w.subresource)
	if fm == nil {
		obj.SetManagedFields(nil)
		return obj
	}
	return s.trackWith(fm, cur, obj, w.manager)
}

// trackWith runs fm.Update; when that fails (which Kubernetes says should
// not happen) obj keeps live's managedFields and the error is logged.
func (s *Server) trackWith(fm *managedfields.FieldManager, live, obj store.Object, manager string) store.Object {
	out, err := fm.Update(live, obj, manager)
	if err != nil {
		s.log.Warn("managedFields not updated", "kind", obj.GetObjectKind().GroupVersionKind().Kind,
			"namespace", obj.GetNamespace(), "name", obj.GetName(), "err", err)
		obj.SetManagedFields(live.GetManagedFields())
		return obj
	}
	return out.(store.Object)
}

// applyConfiguration decodes an apply patch (JSON, converted from YAML
// by readPatch) into an unstructured object, numbers as int64 or float64
// as Kubernetes' unstructured JSON: a 400 when it is not one object.
func applyConfiguration(body []byte) (*unstructured.Unstructured, error) {
	var m map[string]any
	if err := utiljson.Unmarshal(body, &m); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding YAML: %v", err))
	}
	if m == nil {
		return nil, apierrors.NewBadRequest("error decoding YAML: the apply patch is not an object")
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// withWriter checks the field-management options of a POST, PUT or
// PATCH of ri (checkWriteOptions) and puts its writer in the request's
// context.
func (s *Server) withWriter(c echo.Context, ri reqInfo) error {
	req := c.Request()
	q := req.URL.Query()
	apply := req.Method == http.MethodPatch && types.PatchType(mediaType(c)) == types.ApplyYAMLPatchType
	force, err := checkWriteOptions(req.Method, apply, q.Get("fieldManager"), q)
	if err != nil {
		return err
	}
	w := writer{manager: managerOrUserAgent(q.Get("fieldManager"), req.UserAgent()), subresource: ri.sub, force: force}
	c.SetRequest(req.WithContext(withWriter(req.Context(), w)))
	return nil
}
