// Package crontab holds the README's CustomResourceDefinition example; the
// apiserver's CRD tests apply crontab-crd.yaml with the real kubectl.
package crontab

import (
	"os"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// The manifests decode strictly and the custom resource has what the
// CRD's schema requires.
func TestManifests(t *testing.T) {
	b, err := os.ReadFile("crontab-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		t.Fatal(err)
	}
	v := crd.Spec.Versions[0]
	if crd.Name != "crontabs.stable.example.com" || v.Subresources == nil || v.Subresources.Scale == nil {
		t.Errorf("crd %s: scale subresource missing (README scales ct)", crd.Name)
	}
	b, err = os.ReadFile("my-crontab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cr struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       map[string]any `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(b, &cr); err != nil {
		t.Fatal(err)
	}
	for _, req := range v.Schema.OpenAPIV3Schema.Properties["spec"].Required {
		if _, ok := cr.Spec[req]; !ok {
			t.Errorf("my-crontab.yaml lacks required spec.%s", req)
		}
	}
	if cr.APIVersion != crd.Spec.Group+"/"+v.Name || cr.Kind != crd.Spec.Names.Kind || cr.Metadata["name"] != "my-new-cron-object" {
		t.Errorf("custom resource %s %s %v", cr.APIVersion, cr.Kind, cr.Metadata)
	}
}
