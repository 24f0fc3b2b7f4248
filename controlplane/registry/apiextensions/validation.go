package apiextensions

import (
	"fmt"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/jsonpath"
)

// The validation of a CustomResourceDefinition, ported from
// k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation
// (ValidateCustomResourceDefinition and its helpers). That package is not
// linked: with the CEL environment it builds for x-kubernetes-validations
// it adds about 21 MB to orca-server. What is ported: the name rule
// (<plural>.<group>), group, scope, names, versions (unique DNS-1035
// names, exactly one storage version, at least one served), a structural
// openAPIV3Schema in every version (apiextensions' own
// ValidateStructural), subresources, additionalPrinterColumns,
// selectableFields, conversion, storedVersions and the update rules
// (group and plural immutable). What is not: CEL rules are not compiled
// (x-kubernetes-validations are stored but not enforced) and defaults are
// not validated against their schema.

// MaxSchemaDepth is how deep a version's openAPIV3Schema may nest
// (properties, items, additionalProperties, allOf/anyOf/oneOf/not,
// each a level), an orca limit Kubernetes does not have: publishing a
// schema in OpenAPI costs the square of its depth (3000 levels took
// 20 s of every /openapi rebuild). Deeper schemas are a 422.
const MaxSchemaDepth = 256

// schemaDepth returns the nesting depth of s, at most limit.
func schemaDepth(s *apiextensionsv1.JSONSchemaProps, limit int) int {
	if s == nil || limit <= 0 {
		return 0
	}
	deepest := 0
	visit := func(c *apiextensionsv1.JSONSchemaProps) {
		if d := schemaDepth(c, limit-1); d > deepest {
			deepest = d
		}
	}
	for _, m := range []map[string]apiextensionsv1.JSONSchemaProps{s.Properties, s.PatternProperties, s.Definitions} {
		for k := range m {
			c := m[k]
			visit(&c)
		}
	}
	for _, l := range [][]apiextensionsv1.JSONSchemaProps{s.AllOf, s.AnyOf, s.OneOf} {
		for i := range l {
			visit(&l[i])
		}
	}
	visit(s.Not)
	if s.Items != nil {
		visit(s.Items.Schema)
		for i := range s.Items.JSONSchemas {
			visit(&s.Items.JSONSchemas[i])
		}
	}
	if s.AdditionalProperties != nil {
		visit(s.AdditionalProperties.Schema)
	}
	if s.AdditionalItems != nil {
		visit(s.AdditionalItems.Schema)
	}
	return 1 + deepest
}

// MaxSelectableFields is how many selectableFields one version may list,
// as Kubernetes' apiextensions validation.
const MaxSelectableFields = 8

var (
	printerColumnTypes   = sets.New("integer", "number", "string", "boolean", "date")
	printerColumnFormats = sets.New("int32", "int64", "float", "double", "byte", "date", "date-time", "password")
)

// ValidateCustomResourceDefinition checks crd as a new object (metadata is
// checked by the registry; this checks the name rule and the spec).
func ValidateCustomResourceDefinition(crd *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
	var errs field.ErrorList
	if want := crd.Spec.Names.Plural + "." + crd.Spec.Group; crd.Name != want {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), crd.Name, `must be spec.names.plural+"."+spec.group`))
	}
	errs = append(errs, validateSpec(&crd.Spec, field.NewPath("spec"))...)
	errs = append(errs, validateNames(&crd.Status.AcceptedNames, field.NewPath("status", "acceptedNames"))...)
	errs = append(errs, validateStoredVersions(crd.Status.StoredVersions, crd.Spec.Versions, field.NewPath("status", "storedVersions"))...)
	return errs
}

// ValidateCustomResourceDefinitionUpdate checks the update-only rules, as
// Kubernetes' ValidateCustomResourceDefinitionSpecUpdate: spec.group and
// spec.names.plural (which make the name) cannot change, and once old is
// Established neither can spec.scope nor spec.names.kind (they shape the
// stored custom resources: a namespaced object turned cluster-scoped
// would be listed but never found).
func ValidateCustomResourceDefinitionUpdate(crd, old *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if apihelpers.IsCRDConditionTrue(old, apiextensionsv1.Established) {
		errs = append(errs, apivalidation.ValidateImmutableField(crd.Spec.Scope, old.Spec.Scope, spec.Child("scope"))...)
		errs = append(errs, apivalidation.ValidateImmutableField(crd.Spec.Names.Kind, old.Spec.Names.Kind, spec.Child("names", "kind"))...)
	}
	errs = append(errs, apivalidation.ValidateImmutableField(crd.Spec.Group, old.Spec.Group, spec.Child("group"))...)
	return append(errs, apivalidation.ValidateImmutableField(crd.Spec.Names.Plural, old.Spec.Names.Plural, spec.Child("names", "plural"))...)
}

func validateSpec(spec *apiextensionsv1.CustomResourceDefinitionSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case spec.Group == "":
		errs = append(errs, field.Required(p.Child("group"), ""))
	case len(utilvalidation.IsDNS1123Subdomain(spec.Group)) > 0:
		errs = append(errs, field.Invalid(p.Child("group"), spec.Group, strings.Join(utilvalidation.IsDNS1123Subdomain(spec.Group), ",")))
	case !strings.Contains(spec.Group, "."):
		errs = append(errs, field.Invalid(p.Child("group"), spec.Group, "should be a domain with at least one dot"))
	}
	switch spec.Scope {
	case apiextensionsv1.ClusterScoped, apiextensionsv1.NamespaceScoped:
	case "":
		errs = append(errs, field.Required(p.Child("scope"), ""))
	default:
		errs = append(errs, field.NotSupported(p.Child("scope"), spec.Scope, []string{string(apiextensionsv1.ClusterScoped), string(apiextensionsv1.NamespaceScoped)}))
	}
	names := p.Child("names")
	for _, req := range []struct{ name, value string }{{"plural", spec.Names.Plural}, {"singular", spec.Names.Singular}, {"kind", spec.Names.Kind}, {"listKind", spec.Names.ListKind}} {
		if req.value == "" {
			errs = append(errs, field.Required(names.Child(req.name), ""))
		}
	}
	errs = append(errs, validateNames(&spec.Names, names)...)
	if spec.PreserveUnknownFields {
		errs = append(errs, field.Invalid(p.Child("preserveUnknownFields"), true, "must be false (apiextensions.k8s.io/v1); use x-kubernetes-preserve-unknown-fields in the schema"))
	}

	versions := p.Child("versions")
	if len(spec.Versions) == 0 {
		errs = append(errs, field.Required(versions, "must have at least one version"))
	}
	storage, served := 0, 0
	seen := sets.New[string]()
	for i := range spec.Versions {
		v := &spec.Versions[i]
		vp := versions.Index(i)
		if v.Storage {
			storage++
		}
		if v.Served {
			served++
		}
		if seen.Has(v.Name) {
			errs = append(errs, field.Duplicate(vp.Child("name"), v.Name))
		}
		seen.Insert(v.Name)
		if msgs := utilvalidation.IsDNS1035Label(v.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(vp.Child("name"), v.Name, strings.Join(msgs, ",")))
		}
		errs = append(errs, validateVersion(v, vp)...)
	}
	if len(spec.Versions) > 0 && storage != 1 {
		errs = append(errs, field.Invalid(versions, storage, "must have exactly one version marked as storage version"))
	}
	if len(spec.Versions) > 0 && served == 0 {
		errs = append(errs, field.Invalid(versions, served, "must have at least one served version"))
	}
	errs = append(errs, validateConversion(spec.Conversion, p.Child("conversion"))...)
	return errs
}

// validateNames is apiextensions' ValidateCustomResourceDefinitionNames.
func validateNames(n *apiextensionsv1.CustomResourceDefinitionNames, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	label := func(child, value string, lower bool) {
		check := value
		if lower {
			check = strings.ToLower(value)
		}
		if msgs := utilvalidation.IsDNS1035Label(check); value != "" && len(msgs) > 0 {
			msg := strings.Join(msgs, ",")
			if lower {
				msg = "may have mixed case, but should otherwise match: " + msg
			}
			errs = append(errs, field.Invalid(p.Child(child), value, msg))
		}
	}
	label("plural", n.Plural, false)
	label("singular", n.Singular, false)
	label("kind", n.Kind, true)
	label("listKind", n.ListKind, true)
	for i, s := range n.ShortNames {
		if msgs := utilvalidation.IsDNS1035Label(s); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("shortNames").Index(i), s, strings.Join(msgs, ",")))
		}
	}
	if n.Kind != "" && n.Kind == n.ListKind {
		errs = append(errs, field.Invalid(p.Child("listKind"), n.ListKind, "kind and listKind may not be the same"))
	}
	for i, c := range n.Categories {
		if msgs := utilvalidation.IsDNS1035Label(c); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("categories").Index(i), c, strings.Join(msgs, ",")))
		}
	}
	return errs
}

func validateVersion(v *apiextensionsv1.CustomResourceDefinitionVersion, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !v.Deprecated && v.DeprecationWarning != nil {
		errs = append(errs, field.Invalid(p.Child("deprecationWarning"), *v.DeprecationWarning, "can only be set for deprecated versions"))
	}
	schemaPath := p.Child("schema", "openAPIV3Schema")
	var s *Schema
	if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
		errs = append(errs, field.Required(schemaPath, ""))
	} else if d := schemaDepth(v.Schema.OpenAPIV3Schema, MaxSchemaDepth+1); d > MaxSchemaDepth {
		errs = append(errs, field.Invalid(schemaPath, fmt.Sprintf("more than %d levels", MaxSchemaDepth),
			fmt.Sprintf("must not nest more than %d levels", MaxSchemaDepth)))
	} else {
		var serrs field.ErrorList
		s, serrs = NewSchema(v.Schema.OpenAPIV3Schema, schemaPath)
		errs = append(errs, serrs...)
		if s != nil && v.Subresources != nil && v.Subresources.Status != nil {
			if st, ok := s.Structural.Properties["status"]; ok && st.Type != "object" && !st.XPreserveUnknownFields {
				errs = append(errs, field.Invalid(schemaPath.Child("properties", "status", "type"), st.Type, "must be object when the status subresource is enabled"))
			}
		}
	}
	if sr := v.Subresources; sr != nil && sr.Scale != nil {
		sp := p.Child("subresources", "scale")
		errs = append(errs, validateScalePath(sr.Scale.SpecReplicasPath, sp.Child("specReplicasPath"), true, ".spec.")...)
		errs = append(errs, validateScalePath(sr.Scale.StatusReplicasPath, sp.Child("statusReplicasPath"), true, ".status.")...)
		if sr.Scale.LabelSelectorPath != nil && *sr.Scale.LabelSelectorPath != "" {
			errs = append(errs, validateScalePath(*sr.Scale.LabelSelectorPath, sp.Child("labelSelectorPath"), false, ".spec.", ".status.")...)
		}
	}
	for i := range v.AdditionalPrinterColumns {
		errs = append(errs, validateColumn(&v.AdditionalPrinterColumns[i], p.Child("additionalPrinterColumns").Index(i))...)
	}
	fp := p.Child("selectableFields")
	if len(v.SelectableFields) > MaxSelectableFields {
		errs = append(errs, field.TooMany(fp, len(v.SelectableFields), MaxSelectableFields))
	}
	uniq := sets.New[string]()
	for i, f := range v.SelectableFields {
		jp := fp.Index(i).Child("jsonPath")
		if f.JSONPath == "" {
			errs = append(errs, field.Required(jp, ""))
			continue
		}
		if uniq.Has(f.JSONPath) {
			errs = append(errs, field.Duplicate(jp, f.JSONPath))
		}
		uniq.Insert(f.JSONPath)
		if s == nil {
			continue
		}
		segs, ok := simplePath(f.JSONPath)
		if !ok {
			errs = append(errs, field.Invalid(jp, f.JSONPath, "is an invalid path: must be a simple path of field names starting with ."))
			continue
		}
		if segs[0] == "metadata" {
			errs = append(errs, field.Invalid(jp, f.JSONPath, "must not point to fields in metadata"))
			continue
		}
		switch node := schemaAt(s, segs); {
		case node == nil:
			errs = append(errs, field.Invalid(jp, f.JSONPath, "is an invalid path: it is not in the schema"))
		case node.Type != "string" && node.Type != "boolean" && node.Type != "integer":
			errs = append(errs, field.Invalid(jp, f.JSONPath, "must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed."))
		}
	}
	return errs
}

// validateScalePath is apiextensions' check of a scale path: a simple JSON
// path (".spec.replicas") under one of prefixes.
func validateScalePath(path string, p *field.Path, required bool, prefixes ...string) field.ErrorList {
	if path == "" {
		if required {
			return field.ErrorList{field.Required(p, "")}
		}
		return nil
	}
	if _, ok := simplePath(path); !ok {
		return field.ErrorList{field.Invalid(p, path, "must be a simple json path starting with .")}
	}
	for _, pre := range prefixes {
		if strings.HasPrefix(path, pre) {
			return nil
		}
	}
	return field.ErrorList{field.Invalid(p, path, "should be a json path under "+strings.Join(prefixes, " or "))}
}

// simplePath splits a simple JSON path (".spec.replicas") into its field
// names; ok is false for anything else (indexes, filters, empty names).
func simplePath(path string) ([]string, bool) {
	if !strings.HasPrefix(path, ".") || path == "." {
		return nil, false
	}
	segs := strings.Split(path[1:], ".")
	for _, s := range segs {
		if s == "" || strings.ContainsAny(s, "[]{}()*@?$'\" ") {
			return nil, false
		}
	}
	return segs, true
}

// schemaAt returns the schema node of the field at segs, nil when the
// schema does not specify it.
func schemaAt(s *Schema, segs []string) *schemaNode {
	node := s.Structural
	for _, seg := range segs {
		if node == nil || node.Type != "object" {
			return nil
		}
		prop, ok := node.Properties[seg]
		switch {
		case ok:
			node = &prop
		case node.AdditionalProperties != nil && node.AdditionalProperties.Structural != nil:
			node = node.AdditionalProperties.Structural
		default:
			return nil
		}
	}
	return node
}

func validateColumn(c *apiextensionsv1.CustomResourceColumnDefinition, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	}
	switch {
	case c.Type == "":
		errs = append(errs, field.Required(p.Child("type"), "must be one of "+strings.Join(sets.List(printerColumnTypes), ",")))
	case !printerColumnTypes.Has(c.Type):
		errs = append(errs, field.NotSupported(p.Child("type"), c.Type, sets.List(printerColumnTypes)))
	}
	if c.Format != "" && !printerColumnFormats.Has(c.Format) {
		errs = append(errs, field.NotSupported(p.Child("format"), c.Format, sets.List(printerColumnFormats)))
	}
	if c.JSONPath == "" {
		errs = append(errs, field.Required(p.Child("jsonPath"), ""))
	} else if !strings.HasPrefix(c.JSONPath, ".") {
		errs = append(errs, field.Invalid(p.Child("jsonPath"), c.JSONPath, "must be a simple json path starting with ."))
	} else if err := jsonpath.New(c.Name).Parse("{" + c.JSONPath + "}"); err != nil {
		errs = append(errs, field.Invalid(p.Child("jsonPath"), c.JSONPath, fmt.Sprintf("is not a valid JSONPath: %v", err)))
	}
	return errs
}

// validateConversion accepts only the None strategy: orca has no
// conversion webhooks, so versions of one CRD differ only in their
// schemas (a custom resource is stored as sent, with the storage
// version's apiVersion).
func validateConversion(c *apiextensionsv1.CustomResourceConversion, p *field.Path) field.ErrorList {
	if c == nil {
		return nil
	}
	switch c.Strategy {
	case apiextensionsv1.NoneConverter:
		if c.Webhook != nil {
			return field.ErrorList{field.Forbidden(p.Child("webhook"), "should not be set when strategy is not set to Webhook")}
		}
		return nil
	case apiextensionsv1.WebhookConverter:
		return field.ErrorList{field.NotSupported(p.Child("strategy"), c.Strategy, []string{string(apiextensionsv1.NoneConverter) + " (orca has no conversion webhooks)"})}
	default:
		return field.ErrorList{field.NotSupported(p.Child("strategy"), c.Strategy, []string{string(apiextensionsv1.NoneConverter), string(apiextensionsv1.WebhookConverter)})}
	}
}

// validateStoredVersions is apiextensions'
// ValidateCustomResourceDefinitionStoredVersions.
func validateStoredVersions(stored []string, versions []apiextensionsv1.CustomResourceDefinitionVersion, p *field.Path) field.ErrorList {
	if len(stored) == 0 {
		return field.ErrorList{field.Invalid(p, stored, "must have at least one stored version")}
	}
	var errs field.ErrorList
	left := map[string]int{}
	for i, v := range stored {
		left[v] = i
	}
	for _, v := range versions {
		_, ok := left[v.Name]
		if v.Storage && !ok {
			errs = append(errs, field.Invalid(p, stored, "must have the storage version "+v.Name))
		}
		delete(left, v.Name)
	}
	for v, i := range left {
		errs = append(errs, field.Invalid(p.Index(i), v, fmt.Sprintf("missing from spec.versions; %[1]s was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in %[1]s and removes %[1]s from status.storedVersions", v)))
	}
	return errs
}
