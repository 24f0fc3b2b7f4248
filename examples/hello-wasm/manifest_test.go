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
// example promises.
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
	if *d.Spec.Replicas != 3 || *d.Spec.Template.Spec.RuntimeClassName != "wasm" || c.Image != "hello-wasm:v1" ||
		c.Ports[0].ContainerPort != 8080 || c.Resources.Limits.Memory().String() != "64Mi" {
		t.Errorf("deployment = %+v", d.Spec)
	}
	var s corev1.Service
	if err := yaml.UnmarshalStrict(docs[1], &s); err != nil {
		t.Fatal(err)
	}
	if s.Spec.Type != corev1.ServiceTypeNodePort || s.Spec.Ports[0].NodePort != 30080 || s.Spec.Ports[0].TargetPort.StrVal != "http" {
		t.Errorf("service = %+v", s.Spec)
	}

	b, err = os.ReadFile("job/job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var p corev1.Pod
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		t.Fatal(err)
	}
	if *p.Spec.RuntimeClassName != "wasm" {
		t.Errorf("job pod runtimeClassName = %q", *p.Spec.RuntimeClassName)
	}
}
