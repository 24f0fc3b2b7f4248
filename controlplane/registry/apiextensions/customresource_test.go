package apiextensions

import (
	"reflect"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// crontabCRD is Kubernetes' documentation example, with a default, an
// enum, a preserved subtree, status and scale subresources, columns and a
// selectable field.
const crontabCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names: {plural: crontabs, singular: crontab, kind: CronTab, shortNames: [ct]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas, labelSelectorPath: .status.selector}
    additionalPrinterColumns:
    - {name: Spec, type: string, jsonPath: .spec.cronSpec}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    selectableFields:
    - jsonPath: .spec.color
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [cronSpec]
            properties:
              cronSpec: {type: string, pattern: '^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$'}
              image: {type: string}
              replicas: {type: integer, minimum: 1, maximum: 10, default: 1}
              color: {type: string, enum: [red, blue]}
              port: {x-kubernetes-int-or-string: true}
              extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status:
            type: object
            properties:
              replicas: {type: integer}
              selector: {type: string}
`

func loadCRD(t *testing.T, doc string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict([]byte(doc), crd); err != nil {
		t.Fatal(err)
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
	return crd
}

func loadCR(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestCustomResourcePruneDefaultValidate(t *testing.T) {
	crd := loadCRD(t, crontabCRD)
	if errs := ValidateCustomResourceDefinition(crd); len(errs) > 0 {
		t.Fatalf("the example CRD is invalid: %v", errs)
	}
	cr, err := NewCustomResource(crd, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cr.Resource.Bucket(), "cr-crontabs_stable_example_com"; got != want {
		t.Errorf("bucket %q, want %q", got, want)
	}
	obj := loadCR(t, `
apiVersion: stable.example.com/v1
kind: CronTab
metadata: {name: c1, namespace: default}
spec:
  cronSpec: "* * * * */5"
  color: red
  port: http
  unknown: dropped
  extra: {kept: {deep: true}}
junk: 1
`)
	pruned := cr.PruneAndDefault(obj)
	if want := []string{"junk", "spec.unknown"}; !reflect.DeepEqual(pruned, want) {
		t.Errorf("pruned %v, want %v", pruned, want)
	}
	if n, _, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas"); n != 1 {
		t.Errorf("spec.replicas defaulted to %d, want 1", n)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "extra", "kept", "deep"); !found {
		t.Error("x-kubernetes-preserve-unknown-fields subtree was pruned")
	}
	if errs := cr.Validate(obj); len(errs) > 0 {
		t.Errorf("valid object: %v", errs)
	}
	if got := cr.Fields(obj)["spec.color"]; got != "red" {
		t.Errorf("field spec.color = %q", got)
	}
	row := cr.Row(obj)
	if len(row) != 3 || row[0] != "c1" || row[1] != "* * * * */5" || row[2] != int64(1) {
		t.Errorf("row %#v", row)
	}
	spec, _, _ := cr.GetScale(obj)
	if spec != 1 {
		t.Errorf("scale spec replicas %d", spec)
	}
	cr.SetScale(obj, 3)
	if spec, _, _ := cr.GetScale(obj); spec != 3 {
		t.Errorf("after SetScale(3): %d", spec)
	}

	for _, tc := range []struct {
		name, doc string
		want      []string // substrings of the errors, with their paths
	}{
		{"out of range and enum", `{apiVersion: stable.example.com/v1, kind: CronTab, metadata: {name: c}, spec: {cronSpec: "* * * * *", replicas: 20, color: green}}`,
			[]string{"spec.replicas: Invalid value", "spec.color: Unsupported value"}},
		{"required and pattern", `{apiVersion: stable.example.com/v1, kind: CronTab, metadata: {name: c}, spec: {image: x}}`,
			[]string{"spec.cronSpec: Required value"}},
		{"type", `{apiVersion: stable.example.com/v1, kind: CronTab, metadata: {name: c}, spec: {cronSpec: 5, port: [1]}}`,
			[]string{"spec.cronSpec: Invalid value", "spec.port: Invalid value"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := loadCR(t, tc.doc)
			cr.PruneAndDefault(obj)
			errs := cr.Validate(obj).ToAggregate()
			if errs == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(errs.Error(), w) {
					t.Errorf("errors %q lack %q", errs, w)
				}
			}
		})
	}
}

func TestValidateCustomResourceDefinition(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*apiextensionsv1.CustomResourceDefinition)
		want   string
	}{
		{"name is not plural.group", func(c *apiextensionsv1.CustomResourceDefinition) { c.Name = "crontabs.example.com" }, "metadata.name"},
		{"group without a dot", func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Group = "stable"; c.Name = "crontabs.stable" }, "spec.group"},
		{"two storage versions", func(c *apiextensionsv1.CustomResourceDefinition) {
			v := *c.Spec.Versions[0].DeepCopy()
			v.Name = "v2"
			c.Spec.Versions = append(c.Spec.Versions, v)
		}, "exactly one version marked as storage version"},
		{"no schema", func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions[0].Schema = nil }, "spec.versions[0].schema.openAPIV3Schema: Required value"},
		{"not structural", func(c *apiextensionsv1.CustomResourceDefinition) {
			p := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			p.Properties["image"] = apiextensionsv1.JSONSchemaProps{}
			c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = p
		}, "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[image].type: Required value"},
		{"bad scope", func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Scope = "Global" }, "spec.scope: Unsupported value"},
		{"webhook conversion", func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter}
		}, "spec.conversion.strategy: Unsupported value"},
		{"bad column type", func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Versions[0].AdditionalPrinterColumns[0].Type = "map"
		}, "additionalPrinterColumns[0].type"},
		{"selectable field not in schema", func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Versions[0].SelectableFields[0].JSONPath = ".spec.nope"
		}, "selectableFields[0].jsonPath"},
		{"scale path outside spec", func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Versions[0].Subresources.Scale.SpecReplicasPath = ".status.replicas"
		}, "scale.specReplicasPath"},
		{"kind equals listKind", func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Names.ListKind = "CronTab" }, "spec.names.listKind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crd := loadCRD(t, crontabCRD)
			tc.mutate(crd)
			errs := ValidateCustomResourceDefinition(crd).ToAggregate()
			if errs == nil || !strings.Contains(errs.Error(), tc.want) {
				t.Fatalf("errors %v, want one about %q", errs, tc.want)
			}
		})
	}
}

// TestBucketNameFitsJetStream: the longest CRD name Kubernetes allows
// still gives a bucket name JetStream accepts, and distinct long names
// give distinct buckets.
func TestBucketNameFitsJetStream(t *testing.T) {
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 52) + ".com"
	seen := map[string]string{}
	for _, g := range []string{long, strings.Replace(long, "d.com", "e.com", 1), strings.Replace(long, "a", "z", 1)} {
		for _, p := range []string{"things", "thingz"} {
			b := BucketName(g, p)
			if len(b) > MaxBucketNameBytes || strings.Trim(b, "abcdefghijklmnopqrstuvwxyz0123456789_-") != "" {
				t.Errorf("BucketName(%s, %s) = %q (%d bytes)", g, p, b, len(b))
			}
			if prev, ok := seen[b]; ok {
				t.Errorf("%s/%s and %s share bucket %s", g, p, prev, b)
			}
			seen[b] = g + "/" + p
		}
	}
	if got := BucketName("stable.example.com", "crontabs"); got != "cr-crontabs_stable_example_com" {
		t.Errorf("short name changed: %s", got)
	}
}
