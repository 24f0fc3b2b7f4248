package main

import (
	"bytes"
	"os"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The manifests decode strictly into the Kubernetes types and say what the
// example promises: no runtimeClassName (the default handler, runc), the
// image `orca image push` stores, a NodePort Service.
func TestManifests(t *testing.T) {
	b, err := os.ReadFile("app.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(b, []byte("\n---\n"))
	if len(docs) != 2 {
		t.Fatalf("app.yaml has %d documents, want 2", len(docs))
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(docs[0], &d); err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if *d.Spec.Replicas != 2 || d.Spec.Template.Spec.RuntimeClassName != nil || c.Image != "hello-container:v1" || c.Ports[0].ContainerPort != 80 {
		t.Errorf("deployment = %+v", d.Spec)
	}
	var s corev1.Service
	if err := yaml.UnmarshalStrict(docs[1], &s); err != nil {
		t.Fatal(err)
	}
	if s.Spec.Type != corev1.ServiceTypeNodePort || s.Spec.Ports[0].NodePort != 30081 || s.Spec.Ports[0].TargetPort.StrVal != "http" {
		t.Errorf("service = %+v", s.Spec)
	}
}
