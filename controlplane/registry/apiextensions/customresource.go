package apiextensions

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metatable "k8s.io/apimachinery/pkg/api/meta/table"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/jsonpath"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// CustomResource is what one served version of a CustomResourceDefinition
// means for its custom resources: their storage (one KV bucket per CRD,
// shared by its versions), schema, table columns, selectable fields and
// scale paths. Custom resources are *unstructured.Unstructured objects.
// Build it with NewCustomResource; it is read-only after.
type CustomResource struct {
	// Resource is the storage layout and discovery names of the version.
	Resource store.Resource
	// Categories are the CRD's spec.names.categories.
	Categories []string
	// Schema is the version's structural schema.
	Schema *Schema
	// Status and Scale are the version's subresources (Scale nil when
	// it has none).
	Status bool
	Scale  *apiextensionsv1.CustomResourceSubresourceScale

	// TypeConverter is the version's schema for server-side apply
	// (registry.CustomResourceTypeConverter).
	TypeConverter managedfields.TypeConverter

	columns    []metav1.TableColumnDefinition
	columnPath []*jsonpath.JSONPath
	fieldPaths map[string][]string // selectable field label -> path segments
}

// BucketName returns the KV bucket of a CRD's custom resources:
// "cr-<plural>_<group with . as _>" ("cr-crontabs_stable_example_com").
// NATS bucket names allow only [A-Za-z0-9_-]; a plural is a DNS-1035
// label and a group a DNS subdomain, neither holds "_", so the name is
// unambiguous, and no built-in kind's bucket (its plural) starts with
// "cr-".
//
// A JetStream stream name ("KV_" + bucket) holds at most 255 bytes, so a
// name longer than MaxBucketNameBytes (a CRD name of more than 249 of
// the 253 bytes Kubernetes allows) keeps its first 231 bytes followed by
// "-" and 20 hex digits of the SHA-256 of group "/" plural: exactly
// MaxBucketNameBytes long, so it cannot equal a name that was not
// shortened.
func BucketName(group, plural string) string {
	name := "cr-" + plural + "_" + strings.ReplaceAll(group, ".", "_")
	if len(name) <= MaxBucketNameBytes {
		return name
	}
	sum := sha256.Sum256([]byte(group + "/" + plural))
	h := hex.EncodeToString(sum[:10])
	return name[:MaxBucketNameBytes-1-len(h)] + "-" + h
}

// MaxBucketNameBytes is the longest KV bucket name BucketName returns:
// JetStream's 255-byte stream name limit less the "KV_" prefix.
const MaxBucketNameBytes = 255 - len("KV_")

// NewCustomResource returns the custom resources of version (by name) of
// crd. It fails when the version is missing or not served, or its schema,
// columns or selectable fields do not build (a CRD that passed
// ValidateCustomResourceDefinition always builds).
func NewCustomResource(crd *apiextensionsv1.CustomResourceDefinition, version string) (*CustomResource, error) {
	var v *apiextensionsv1.CustomResourceDefinitionVersion
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == version {
			v = &crd.Spec.Versions[i]
		}
	}
	if v == nil || !v.Served {
		return nil, fmt.Errorf("customresourcedefinition %s: version %q is not served", crd.Name, version)
	}
	if v.Schema == nil {
		return nil, fmt.Errorf("customresourcedefinition %s: version %s has no schema", crd.Name, version)
	}
	s, errs := NewSchema(v.Schema.OpenAPIV3Schema, field.NewPath("spec", "versions").Key(version).Child("schema", "openAPIV3Schema"))
	if len(errs) > 0 {
		return nil, fmt.Errorf("customresourcedefinition %s: %w", crd.Name, errs.ToAggregate())
	}
	names := crd.Spec.Names
	if crd.Status.AcceptedNames.Plural != "" {
		names = crd.Status.AcceptedNames // as Kubernetes serves the accepted names
	}
	group := crd.Spec.Group
	cr := &CustomResource{
		Resource: store.Resource{Group: group, Version: version, Kind: names.Kind, ListKind: names.ListKind,
			Plural: names.Plural, Singular: names.Singular, ShortNames: names.ShortNames,
			Namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
			BucketName: BucketName(group, crd.Spec.Names.Plural)},
		Categories: names.Categories,
		Schema:     s,
		fieldPaths: map[string][]string{},
	}
	gvk := cr.Resource.GroupVersion().WithKind(names.Kind)
	cr.Resource.New = func() store.Object {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		return u
	}
	cr.Resource.NewList = func() runtime.Object {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(cr.Resource.GroupVersion().WithKind(names.ListKind))
		return l
	}
	if sr := v.Subresources; sr != nil {
		cr.Status = sr.Status != nil
		cr.Scale = sr.Scale
	}
	preserve := s.Structural.XPreserveUnknownFields
	var err error
	if cr.TypeConverter, err = registry.CustomResourceTypeConverter(gvk, s.OpenAPI, preserve); err != nil {
		return nil, fmt.Errorf("customresourcedefinition %s: version %s: server-side apply schema: %w", crd.Name, version, err)
	}
	if err := cr.buildColumns(v.AdditionalPrinterColumns); err != nil {
		return nil, fmt.Errorf("customresourcedefinition %s: %w", crd.Name, err)
	}
	for _, f := range v.SelectableFields {
		segs, ok := simplePath(f.JSONPath)
		if !ok {
			return nil, fmt.Errorf("customresourcedefinition %s: selectable field %q is not a simple path", crd.Name, f.JSONPath)
		}
		cr.fieldPaths[f.JSONPath[1:]] = segs
	}
	return cr, nil
}

// defaultColumns are the columns of a version without
// additionalPrinterColumns, as Kubernetes serves them.
var defaultColumns = []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"}}

// buildColumns is apiextensions' tableconvertor.New: a Name column, then
// one column per additionalPrinterColumn read with its JSONPath.
func (c *CustomResource) buildColumns(cols []apiextensionsv1.CustomResourceColumnDefinition) error {
	if len(cols) == 0 {
		cols = defaultColumns
	}
	c.columns = []metav1.TableColumnDefinition{{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]}}
	for _, col := range cols {
		p := jsonpath.New(col.Name)
		if err := p.Parse("{" + col.JSONPath + "}"); err != nil {
			return fmt.Errorf("column %q: JSONPath %q: %w", col.Name, col.JSONPath, err)
		}
		p.AllowMissingKeys(true)
		desc := col.Description
		if desc == "" {
			desc = "Custom resource definition column (in JSONPath format): " + col.JSONPath
		}
		c.columnPath = append(c.columnPath, p)
		c.columns = append(c.columns, metav1.TableColumnDefinition{Name: col.Name, Type: col.Type, Format: col.Format, Description: desc, Priority: col.Priority})
	}
	return nil
}

// Columns returns the table columns (Name, then the
// additionalPrinterColumns, or Age when there are none).
func (c *CustomResource) Columns() []metav1.TableColumnDefinition { return c.columns }

// Row returns the cells of obj for Columns, as apiextensions'
// tableconvertor: a missing value is nil, a "string" column is printed
// as kubectl's JSONPath prints it, a "date" column is a human-readable
// age ("5m").
func (c *CustomResource) Row(obj store.Object) []any {
	cells := []any{obj.GetName()}
	content := content(obj)
	var buf bytes.Buffer
	for i, p := range c.columnPath {
		typ := c.columns[i+1].Type
		results, err := p.FindResults(content)
		if err != nil || len(results) == 0 || len(results[0]) == 0 {
			cells = append(cells, nil)
			continue
		}
		value := results[0][0].Interface()
		if typ == "string" {
			buf.Reset()
			if err := p.PrintResults(&buf, []reflect.Value{reflect.ValueOf(value)}); err == nil {
				cells = append(cells, buf.String())
			} else {
				cells = append(cells, nil)
			}
			continue
		}
		cells = append(cells, cellForJSONValue(typ, value))
	}
	return cells
}

func cellForJSONValue(typ string, value any) any {
	switch typ {
	case "integer":
		switch v := value.(type) {
		case int64:
			return v
		case float64:
			return int64(v)
		case json.Number:
			if i, err := v.Int64(); err == nil {
				return i
			}
		}
	case "number":
		switch v := value.(type) {
		case int64:
			return float64(v)
		case float64:
			return v
		case json.Number:
			if f, err := v.Float64(); err == nil {
				return f
			}
		}
	case "boolean":
		if b, ok := value.(bool); ok {
			return b
		}
	case "date":
		if s, ok := value.(string); ok {
			var ts metav1.Time
			if err := ts.UnmarshalQueryParameter(s); err != nil {
				return "<invalid>"
			}
			return metatable.ConvertToHumanReadableDateType(ts)
		}
	}
	return nil
}

// Fields returns the selectable fields of obj (without the metadata
// ones): each of the version's selectableFields by its path without the
// leading dot ("spec.color"), its value printed as a field selector
// compares it ("" when missing), as Kubernetes' CRD field selectors.
func (c *CustomResource) Fields(obj store.Object) fields.Set {
	set := fields.Set{}
	content := content(obj)
	for label, segs := range c.fieldPaths {
		v, found, err := unstructured.NestedFieldNoCopy(content, segs...)
		if !found || err != nil || v == nil {
			set[label] = ""
			continue
		}
		set[label] = fmt.Sprint(v)
	}
	return set
}

// HasFields reports whether the version has selectableFields.
func (c *CustomResource) HasFields() bool { return len(c.fieldPaths) > 0 }

// PruneAndDefault drops the fields obj's schema does not specify and sets
// its defaults, as the apiextensions apiserver does to every custom
// resource it decodes (pruning, then structural defaulting). It returns
// the pruned paths ("spec.foo"), which fieldValidation reports.
func (c *CustomResource) PruneAndDefault(obj store.Object) []string {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	pruned := c.Schema.Prune(u.Object)
	c.Schema.Default(u.Object)
	return pruned
}

// UnknownFields returns the paths of the fields of data (a custom
// resource's JSON) the schema would prune, as Kubernetes' fieldValidation
// reports them for custom resources ("unknown field \"spec.foo\"").
func (c *CustomResource) UnknownFields(data []byte) []string {
	m := map[string]any{}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil
	}
	return c.Schema.Prune(m)
}

// Validate checks obj against the version's schema and its scale paths,
// as apiextensions' customResourceValidator (metadata is the registry's;
// apiVersion and kind are set by the apiserver from the path). Paths are
// from the object's root ("spec.replicas").
func (c *CustomResource) Validate(obj store.Object) field.ErrorList {
	content := content(obj)
	errs := c.Schema.Validate(content)
	if c.Scale != nil {
		errs = append(errs, validateReplicas(content, c.Scale.SpecReplicasPath)...)
		errs = append(errs, validateReplicas(content, c.Scale.StatusReplicasPath)...)
		if p := c.Scale.LabelSelectorPath; p != nil && *p != "" {
			if _, _, err := unstructured.NestedString(content, strings.Split(strings.TrimPrefix(*p, "."), ".")...); err != nil {
				errs = append(errs, field.Invalid(field.NewPath(strings.TrimPrefix(*p, ".")), "", err.Error()))
			}
		}
	}
	return errs
}

// validateReplicas is apiextensions' ValidateScaleSpec/ValidateScaleStatus:
// a replicas field, when set, is an integer from 0 to 2^31-1.
func validateReplicas(content map[string]any, path string) field.ErrorList {
	segs := strings.Split(strings.TrimPrefix(path, "."), ".")
	p := field.NewPath(segs[0], segs[1:]...)
	n, _, err := unstructured.NestedInt64(content, segs...)
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(p, n, err.Error())}
	case n < 0:
		return field.ErrorList{field.Invalid(p, n, "should be a non-negative integer")}
	case n > math.MaxInt32:
		return field.ErrorList{field.Invalid(p, n, fmt.Sprintf("should be less than or equal to %v", math.MaxInt32))}
	}
	return nil
}

// GetScale returns spec and status replicas and the label selector of
// obj from the version's scale paths (0 and "" when missing).
func (c *CustomResource) GetScale(obj store.Object) (specReplicas, statusReplicas int32, selector string) {
	content := content(obj)
	get := func(path string) int32 {
		n, _, _ := unstructured.NestedInt64(content, strings.Split(strings.TrimPrefix(path, "."), ".")...)
		return int32(min(max(n, 0), math.MaxInt32))
	}
	specReplicas, statusReplicas = get(c.Scale.SpecReplicasPath), get(c.Scale.StatusReplicasPath)
	if p := c.Scale.LabelSelectorPath; p != nil && *p != "" {
		selector, _, _ = unstructured.NestedString(content, strings.Split(strings.TrimPrefix(*p, "."), ".")...)
	}
	return specReplicas, statusReplicas, selector
}

// SetScale sets obj's spec replicas (at the version's specReplicasPath).
func (c *CustomResource) SetScale(obj store.Object, replicas int32) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		_ = unstructured.SetNestedField(u.Object, int64(replicas), strings.Split(strings.TrimPrefix(c.Scale.SpecReplicasPath, "."), ".")...)
	}
}

// content returns obj as a JSON map: the unstructured content of a custom
// resource, else obj converted.
func content(obj store.Object) map[string]any {
	if u, ok := obj.(runtime.Unstructured); ok {
		return u.UnstructuredContent()
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return map[string]any{}
	}
	return m
}

// Kind returns the registry kind serving the version's custom resources:
// unstructured objects pruned and defaulted by the schema (Default), then
// validated by it (Validate), with the CRD's columns, selectable fields,
// status and scale subresources; generation is bumped on every change
// beyond metadata and status, as for every custom resource.
func (c *CustomResource) Kind() registry.Kind {
	k := registry.Kind{
		Resource:   c.Resource,
		Categories: c.Categories,
		Status:     c.Status,
		Generation: true,
		Default:    func(obj store.Object) { c.PruneAndDefault(obj) },
		Validate:   c.Validate,
		Columns:    c.Columns(),
		Row:        c.Row,

		OpenAPISchema: c.Schema.OpenAPI,
		UnknownFields: c.UnknownFields,
		TypeConverter: c.TypeConverter,
	}
	if c.HasFields() {
		k.Fields = c.Fields
	}
	if c.Scale != nil {
		k.Scale = &registry.Scale{Get: c.GetScale, Set: c.SetScale}
	}
	return k
}
