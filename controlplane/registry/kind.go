package registry

import (
	"slices"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/orca-edge/orca/controlplane/store"
)

// Kind is everything one API kind means: its storage layout and discovery
// names (the embedded store.Resource) and its strategy, as a Kubernetes
// registry's strategy.go. Every func field may be nil, which means
// "nothing kind-specific" (the generic behaviour is said on each field).
// A Kind is read-only once added to a Registry.
type Kind struct {
	store.Resource

	// Categories are discovery categories ("all": kubectl get all).
	Categories []string
	// Verbs are the verbs of the main resource in discovery and at the
	// API. Nil: AllVerbs. A verb missing here (namespaces have no
	// deletecollection) is a 405 MethodNotAllowed.
	Verbs metav1.Verbs
	// NameValidation checks metadata.name (ValidateObjectMeta's
	// ValidateNameFunc). Nil: apivalidation.NameIsDNSSubdomain.
	NameValidation apivalidation.ValidateNameFunc

	// Status means the kind has a status subresource: a write of the main
	// resource keeps the stored status, a write of <plural>/status changes
	// only status and metadata (less ownerReferences), as Kubernetes'
	// strategies' PrepareForUpdate and their StatusStrategy.
	Status bool
	// Scale, when set, gives the kind a <plural>/scale subresource
	// (autoscaling/v1 Scale).
	Scale *Scale
	// Subresources are the kind's other subresources (pods/log,
	// pods/binding, namespaces/finalize...), listed by discovery. Those
	// with Update are served generically (PUT); the others are served by
	// a handler of the apiserver (connect-style: log, exec, binding).
	Subresources []Subresource
	// Virtual means objects of the kind are never stored: the kind has
	// only the create verb (Verbs), served by an apiserver handler that
	// answers from what it knows (TokenReview, SelfSubjectReview, the
	// access reviews), as Kubernetes' create-only REST storages.
	// Controllers skip virtual kinds (no bucket, no informer).
	Virtual bool
	// Generation means metadata.generation is bumped by every write that
	// changes anything but metadata and status (Deployment, ReplicaSet:
	// the kinds whose controllers report status.observedGeneration).
	// False: the kind has no generation (metadata.generation is not set).
	Generation bool

	// Default fills unset fields with the scheme's defaults
	// (pkg/apis/<group>/v1/defaults.go). Runs on every create and update,
	// after PrepareForCreate / PrepareForUpdate, so it must be idempotent.
	Default func(obj store.Object)
	// PrepareForCreate resets what a client may not set on create (a pod
	// starts Pending, status starts empty).
	PrepareForCreate func(obj store.Object)
	// PrepareForUpdate carries over what a client may not change (a
	// secret's type when not sent); old is the stored object, not to be
	// modified. Status handling is generic (see Status).
	PrepareForUpdate func(obj, old store.Object)
	// AfterUpdateMerge, when set, runs on an update once the status rules
	// have taken what the write may change (and Default has run), on the
	// object to store: for what follows from the spec as stored (a
	// DaemonSet's template generation), which a status write must not move.
	AfterUpdateMerge func(obj, old store.Object)
	// Validate checks the kind's own fields on create and update
	// (metadata is checked generically: ValidateObjectMeta).
	Validate func(obj store.Object) field.ErrorList
	// ValidateUpdate checks the update-only rules (immutable fields);
	// Validate runs on updates too.
	ValidateUpdate func(obj, old store.Object) field.ErrorList

	// Columns and Row make the server-side table (kubectl get) as
	// Kubernetes' printers: Row returns one cell per column. Nil: Name
	// and Age.
	Columns []metav1.TableColumnDefinition
	Row     func(obj store.Object) []any
	// Fields returns the fields an object can be selected by beyond
	// metadata.name and metadata.namespace (the registries'
	// GetAttrs/ToSelectableFields). It must give the same keys for every
	// object, the zero one included (New()): those are the supported
	// field labels. Nil: metadata only.
	Fields func(obj store.Object) fields.Set

	// GracePeriod returns the grace period of a delete in seconds, from
	// the DeleteOptions' gracePeriodSeconds (nil when not sent) and the
	// object, as the pod strategy's CheckGracefulDelete. A positive one
	// marks the object (deletionTimestamp, deletionGracePeriodSeconds)
	// and leaves the removal to its owner (the node agent). Nil: 0,
	// removed at once.
	GracePeriod func(obj store.Object, requested *int64) int64
	// NoDependents means objects of the kind own nothing, so foreground
	// deletion adds no foregroundDeletion finalizer (pods).
	NoDependents bool
	// PrepareForDelete changes an object being deleted that is only
	// marked (namespaces become Terminating).
	PrepareForDelete func(obj store.Object)
	// Finalizing reports kind-specific finalization still pending, which
	// keeps a marked object stored as metadata finalizers do (a
	// namespace's spec.finalizers). Nil: none.
	Finalizing func(obj store.Object) bool
	// AdmitDelete refuses a delete before anything is read (immortal
	// namespaces: 403, as NamespaceLifecycle admission). Nil: allowed.
	AdmitDelete func(namespace, name string) error

	// TypeConverter is the kind's schema for server-side apply and
	// managedFields (k8s.io/apimachinery/pkg/util/managedfields): which
	// lists are maps keyed by what, which fields are atomic. Nil: the
	// generated OpenAPI definition of the kind's Go type (every k8s.io/api
	// kind), or, for a kind whose objects are unstructured (custom
	// resources), managedfields.NewDeducedTypeConverter(), which merges
	// every field as atomic. Build a custom resource's from its CRD
	// version's schema with CustomResourceTypeConverter.
	TypeConverter managedfields.TypeConverter
	// OpenAPISchema is the OpenAPI schema of the objects of a kind whose
	// Go type has no generated definition (custom resources: their CRD
	// version's schema); the apiserver completes apiVersion, kind and
	// metadata. Nil for typed kinds.
	OpenAPISchema *spec.Schema
	// UnknownFields returns the paths of the fields of a JSON body that
	// objects of the kind cannot hold ("spec.foo"), for fieldValidation,
	// when the kind is not decoded into a Go struct (custom resources:
	// the fields their schema prunes). Nil: the strict decoding into New()
	// finds them.
	UnknownFields func(data []byte) []string
}

// Scale describes a kind's scale subresource, as Kubernetes' ScaleREST
// (typed kinds) or a CRD's spec/status replicas and label selector paths.
type Scale struct {
	// Get returns spec.replicas, status.replicas and the label selector
	// of obj in its string form ("" when none). Required.
	Get func(obj store.Object) (specReplicas, statusReplicas int32, selector string)
	// Set sets spec.replicas of obj. Required.
	Set func(obj store.Object, replicas int32)
}

// Subresource is one subresource of a kind, as discovery lists it.
type Subresource struct {
	// Name is the path segment ("log": pods/log).
	Name string
	// Kind, Group and Version name the subresource's object when it is
	// not the parent kind ("Binding"); empty: the parent's.
	Kind, Group, Version string
	// Verbs are its discovery verbs ("get", "create", "update").
	Verbs metav1.Verbs
	// Update, when set, makes PUT of the subresource an update of the
	// parent object: it returns the object to store from the sent one
	// (obj) and the stored one (old), both as JSON maps (namespaces/
	// finalize changes only spec.finalizers). The generic update rules
	// (system metadata, defaults, validation) then apply.
	Update func(obj, old map[string]any) map[string]any
}

// AllVerbs are the verbs of a kind with no Verbs of its own.
var AllVerbs = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

// GroupVersionKind returns the kind's group, version and kind.
func (k *Kind) GroupVersionKind() schema.GroupVersionKind {
	return k.GroupVersion().WithKind(k.Kind)
}

// GroupVersionResource returns the kind's group, version and plural.
func (k *Kind) GroupVersionResource() schema.GroupVersionResource {
	return k.GroupVersion().WithResource(k.Plural)
}

// AllowedVerbs returns Verbs, or AllVerbs when nil.
func (k *Kind) AllowedVerbs() metav1.Verbs {
	if k.Verbs == nil {
		return AllVerbs
	}
	return k.Verbs
}

// Allows reports whether verb is one of AllowedVerbs.
func (k *Kind) Allows(verb string) bool { return slices.Contains(k.AllowedVerbs(), verb) }

// Subresource returns the subresource named name: "status" and "scale"
// when the kind has them, else one of Subresources.
func (k *Kind) Subresource(name string) (Subresource, bool) {
	for _, s := range k.subresources() {
		if s.Name == name {
			return s, true
		}
	}
	return Subresource{}, false
}

func (k *Kind) subresources() []Subresource {
	var out []Subresource
	if k.Status {
		out = append(out, Subresource{Name: "status", Verbs: metav1.Verbs{"get", "patch", "update"}})
	}
	out = append(out, k.Subresources...)
	if k.Scale != nil {
		out = append(out, Subresource{Name: "scale", Group: "autoscaling", Version: "v1", Kind: "Scale", Verbs: metav1.Verbs{"get", "patch", "update"}})
	}
	return out
}

// APIResources returns the discovery entries of the kind and of its
// subresources (metav1.APIResource, as /api/v1 lists them).
func (k *Kind) APIResources() []metav1.APIResource {
	out := []metav1.APIResource{{Name: k.Plural, SingularName: k.Singular, Namespaced: k.Namespaced, Kind: k.Kind,
		Verbs: k.AllowedVerbs(), ShortNames: k.ShortNames, Categories: k.Categories}}
	for _, s := range k.subresources() {
		ar := metav1.APIResource{Name: k.Plural + "/" + s.Name, Namespaced: k.Namespaced, Kind: s.Kind, Group: s.Group, Version: s.Version, Verbs: s.Verbs}
		if ar.Kind == "" {
			ar.Kind = k.Kind
		}
		out = append(out, ar)
	}
	return out
}

// FieldSet returns the fields obj can be selected by: metadata.name,
// metadata.namespace and the kind's Fields.
func (k *Kind) FieldSet(obj store.Object) fields.Set {
	set := fields.Set{"metadata.name": obj.GetName(), "metadata.namespace": obj.GetNamespace()}
	if k.Fields != nil {
		for f, v := range k.Fields(obj) {
			set[f] = v
		}
	}
	return set
}

// TableColumns returns Columns, or Name and Age when nil.
func (k *Kind) TableColumns() []metav1.TableColumnDefinition {
	if k.Columns == nil || k.Row == nil {
		return []metav1.TableColumnDefinition{NameColumn, AgeColumn}
	}
	return k.Columns
}

// TableRow returns the cells of obj in the order of TableColumns.
func (k *Kind) TableRow(obj store.Object) []any {
	if k.Columns == nil || k.Row == nil {
		return []any{obj.GetName(), Age(obj)}
	}
	return k.Row(obj)
}

func (k *Kind) nameValidation() apivalidation.ValidateNameFunc {
	if k.NameValidation == nil {
		return apivalidation.NameIsDNSSubdomain
	}
	return k.NameValidation
}
