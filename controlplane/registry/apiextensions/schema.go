package apiextensions

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	openapierrors "k8s.io/kube-openapi/pkg/validation/errors"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
)

// Schema is the structural schema of one version of a
// CustomResourceDefinition, ready to validate, default and prune the
// custom resources of that version, as the Kubernetes apiextensions
// apiserver does with its structural schema
// (k8s.io/apiextensions-apiserver/pkg/apiserver/schema), its pruning
// package, and kube-openapi's validator.
//
// Limits (documented in the README): x-kubernetes-validations (CEL
// rules) are kept in the schema and in OpenAPI but not evaluated;
// validation does not ratchet (an update is validated as a create).
type Schema struct {
	// Structural is the schema as apiextensions' structural schema.
	Structural *structuralschema.Structural
	// OpenAPI is the schema as published in /openapi/v2 and v3 (kubectl
	// explain, client-side validation): Structural.ToKubeOpenAPI less
	// what Swagger 2.0 cannot say, as Kubernetes' ToStructuralOpenAPIV2:
	// no anyOf, oneOf, allOf or not, and a nullable field untyped.
	OpenAPI   *spec.Schema
	validator *validate.SchemaValidator
}

// NewSchema converts props (the openAPIV3Schema of one CRD version) to a
// Schema. It fails when props is not structural (the errors of
// apiextensions' ValidateStructural, under fldPath) or cannot be
// converted.
func NewSchema(props *apiextensionsv1.JSONSchemaProps, fldPath *field.Path) (*Schema, field.ErrorList) {
	if props == nil {
		return nil, field.ErrorList{field.Required(fldPath, "a schema is required")}
	}
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(props, internal, nil); err != nil {
		return nil, field.ErrorList{field.Invalid(fldPath, "", fmt.Sprintf("cannot convert the schema: %v", err))}
	}
	s, err := structuralschema.NewStructural(internal)
	if err != nil {
		return nil, field.ErrorList{field.Invalid(fldPath, "", err.Error())}
	}
	if errs := structuralschema.ValidateStructural(fldPath, s); len(errs) > 0 {
		return nil, errs
	}
	if s.Type != "object" {
		return nil, field.ErrorList{field.Invalid(fldPath.Child("type"), s.Type, "must be object at the root")}
	}
	o := s.ToKubeOpenAPI()
	typeIntOrString(o)
	doc := s.ToKubeOpenAPI()
	forSwagger2(doc)
	return &Schema{Structural: s, OpenAPI: doc, validator: validate.NewSchemaValidator(o, nil, "", strfmt.Default)}, nil
}

// typeIntOrString types every x-kubernetes-int-or-string node of o as
// ["integer","string"], as apiextensions' ConvertJSONSchemaProps does for
// its validator (the structural form leaves such a node untyped).
func typeIntOrString(o *spec.Schema) {
	if o == nil {
		return
	}
	if v, ok := o.Extensions["x-kubernetes-int-or-string"].(bool); ok && v && len(o.Type) == 0 {
		o.Type = spec.StringOrArray{"integer", "string"}
	}
	for k, p := range o.Properties {
		typeIntOrString(&p)
		o.Properties[k] = p
	}
	if o.Items != nil {
		typeIntOrString(o.Items.Schema)
	}
	if o.AdditionalProperties != nil {
		typeIntOrString(o.AdditionalProperties.Schema)
	}
}

// forSwagger2 removes from o what Swagger 2.0 has no word for: anyOf,
// oneOf, allOf and not, and the type of a nullable node (a null value
// must not fail a client's validation).
func forSwagger2(o *spec.Schema) {
	if o == nil {
		return
	}
	o.AnyOf, o.OneOf, o.AllOf, o.Not = nil, nil, nil, nil
	if o.Nullable {
		o.Type, o.Nullable = nil, false
	}
	for k, p := range o.Properties {
		forSwagger2(&p)
		o.Properties[k] = p
	}
	if o.Items != nil {
		forSwagger2(o.Items.Schema)
	}
	if o.AdditionalProperties != nil {
		forSwagger2(o.AdditionalProperties.Schema)
	}
}

// Validate checks obj (a custom resource's JSON content) against the
// schema and its list types (x-kubernetes-list-type set and map), as
// apiextensions' ValidateCustomResource and ValidateListSetsAndMaps.
// Errors carry the field's path from the object's root ("spec.replicas").
func (s *Schema) Validate(obj map[string]any) field.ErrorList {
	errs := resultToFieldErrors(s.validator.Validate(obj))
	return append(errs, listtype.ValidateListSetsAndMaps(nil, s.Structural, obj)...)
}

// Default sets the schema's defaults in obj where fields are missing (or
// null and not nullable), then drops the nulls that are neither nullable
// nor defaulted, as apiextensions' structural defaulting (Default and
// PruneNonNullableNullsWithoutDefaults).
func (s *Schema) Default(obj map[string]any) {
	applyDefaults(obj, s.Structural)
	pruneNonNullableNulls(obj, s.Structural)
}

// Prune removes the fields of obj the schema does not specify (except
// where x-kubernetes-preserve-unknown-fields is set, and apiVersion, kind
// and metadata at the root and in embedded resources) and returns their
// paths, sorted ("spec.foo"), as apiextensions' pruning.PruneWithOptions.
func (s *Schema) Prune(obj map[string]any) []string {
	return pruning.PruneWithOptions(obj, s.Structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
}

// resultToFieldErrors turns kube-openapi validation errors into field
// errors, as apiextensions' kubeOpenAPIResultToFieldErrors.
func resultToFieldErrors(result *validate.Result) field.ErrorList {
	if result.IsValid() {
		return nil
	}
	var errs field.ErrorList
	for _, err := range result.Errors {
		verr, ok := err.(*openapierrors.Validation)
		if !ok {
			errs = append(errs, field.Invalid(nil, "", err.Error()))
			continue
		}
		var p *field.Path
		if name := strings.TrimPrefix(verr.Name, "."); name != "" {
			p = field.NewPath(name)
		}
		value := verr.Value
		if value == nil {
			value = ""
		}
		switch verr.Code() {
		case openapierrors.RequiredFailCode:
			errs = append(errs, field.Required(p, ""))
		case openapierrors.EnumFailCode:
			var values []string
			for _, v := range verr.Values {
				if str, ok := v.(string); ok {
					values = append(values, str)
				} else {
					b, _ := json.Marshal(v)
					values = append(values, string(b))
				}
			}
			errs = append(errs, field.NotSupported(p, verr.Value, values))
		case openapierrors.TooLongFailCode:
			limit := int64(-1)
			if i, ok := verr.Valid.(int64); ok {
				limit = i
			}
			errs = append(errs, field.TooLong(p, "", int(limit)))
		case openapierrors.MaxItemsFailCode, openapierrors.TooManyPropertiesCode:
			actual, limit := int64(-1), int64(-1)
			if i, ok := verr.Value.(int64); ok {
				actual = i
			}
			if i, ok := verr.Valid.(int64); ok {
				limit = i
			}
			errs = append(errs, field.TooMany(p, int(actual), int(limit)))
		case openapierrors.InvalidTypeCode:
			errs = append(errs, field.TypeInvalid(p, value, verr.Error()))
		default:
			errs = append(errs, field.Invalid(p, value, verr.Error()))
		}
	}
	return errs
}

// applyDefaults is apiextensions' structural defaulting.Default (its
// package also holds CEL validation of defaults, which orca does not
// link): missing fields, and nulls that are not nullable, take the
// schema's default, deep-copied.
func applyDefaults(x any, s *structuralschema.Structural) {
	if s == nil {
		return
	}
	switch x := x.(type) {
	case map[string]any:
		for k, prop := range s.Properties {
			if prop.Default.Object == nil {
				continue
			}
			if v, found := x[k]; !found || isNonNullableNull(v, &prop) {
				x[k] = runtime.DeepCopyJSONValue(prop.Default.Object)
			}
		}
		for k, v := range x {
			if prop, found := s.Properties[k]; found {
				applyDefaults(v, &prop)
			} else if s.AdditionalProperties != nil && s.AdditionalProperties.Structural != nil {
				ap := s.AdditionalProperties.Structural
				if isNonNullableNull(v, ap) && ap.Default.Object != nil {
					x[k] = runtime.DeepCopyJSONValue(ap.Default.Object)
				}
				applyDefaults(x[k], ap)
			}
		}
	case []any:
		for i := range x {
			if isNonNullableNull(x[i], s.Items) && s.Items.Default.Object != nil {
				x[i] = runtime.DeepCopyJSONValue(s.Items.Default.Object)
			}
			applyDefaults(x[i], s.Items)
		}
	}
}

func isNonNullableNull(x any, s *structuralschema.Structural) bool {
	return x == nil && s != nil && !s.Generic.Nullable
}

// pruneNonNullableNulls is apiextensions'
// defaulting.PruneNonNullableNullsWithoutDefaults: a null field (or
// additional property) whose schema is neither nullable nor defaulted is
// dropped.
func pruneNonNullableNulls(x any, s *structuralschema.Structural) {
	if s == nil {
		return
	}
	switch x := x.(type) {
	case map[string]any:
		for k, v := range x {
			var sub *structuralschema.Structural
			if prop, ok := s.Properties[k]; ok {
				sub = &prop
			} else if s.AdditionalProperties != nil {
				sub = s.AdditionalProperties.Structural
			}
			if sub == nil {
				continue
			}
			if v == nil && !sub.Nullable && sub.Default.Object == nil {
				delete(x, k)
				continue
			}
			pruneNonNullableNulls(v, sub)
		}
	case []any:
		for _, v := range x {
			pruneNonNullableNulls(v, s.Items)
		}
	}
}

// schemaNode is one node of a structural schema.
type schemaNode = structuralschema.Structural
