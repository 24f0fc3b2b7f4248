package apiserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8saudit "k8s.io/apiserver/pkg/audit"

	"github.com/orca-edge/orca/controlplane/controllers"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestPodSecurityWithKubectl drives Pod Security admission with the real
// kubectl: namespace labels choose the level, a violating pod is refused
// with Kubernetes' message, warn mode and workload templates print
// kubectl's "Warning:" lines, a WASM pod needs no securityContext in a
// restricted namespace, a ReplicaSet's pods are refused as the
// controller creates them, and tightening a namespace warns about its
// existing pods.
func TestPodSecurityWithKubectl(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := func(stdin string, args ...string) string {
		t.Helper()
		out, err := e.kubectl(ctx, stdin, args...)
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return out
	}
	k("", "create", "namespace", "strict")
	k("", "label", "namespace", "strict", "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted")

	out, err := e.kubectl(ctx, "", "run", "-n", "strict", "plain", "--image=busybox")
	if err == nil || !strings.Contains(out, `Error from server (Forbidden): pods "plain" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "plain" must set securityContext.allowPrivilegeEscalation=false)`) {
		t.Fatalf("a plain pod in a restricted namespace: %v\n%s", err, out)
	}
	wasm := `apiVersion: v1
kind: Pod
metadata: {name: hello, namespace: strict}
spec:
  runtimeClassName: wasm
  containers: [{name: hello, image: hello-wasm}]
`
	if out := k(wasm, "apply", "-f", "-"); !strings.Contains(out, "pod/hello created") || strings.Contains(out, "Warning") {
		t.Fatalf("a WASM pod in a restricted namespace:\n%s", out)
	}
	hostPath := strings.Replace(wasm, "name: hello,", "name: hostpath,", 1) + "  volumes: [{name: root, hostPath: {path: /}}]\n"
	if out, err := e.kubectl(ctx, hostPath, "apply", "-f", "-"); err == nil || !strings.Contains(out, `restricted volume types (volume "root" uses restricted volume type "hostPath")`) {
		t.Fatalf("a WASM pod mounting / in a restricted namespace: %v\n%s", err, out)
	}

	// A Deployment is admitted with a warning; the controllers' pods are
	// refused (FailedCreate on the ReplicaSet).
	cm, err := controllers.New(controllers.Config{Store: e.st, Registry: e.srv.reg})
	if err != nil {
		t.Fatal(err)
	}
	storetest.RunUntilCleanup(t, cm.Run)
	out = k("", "create", "deployment", "web", "-n", "strict", "--image=nginx")
	if !strings.Contains(out, `Warning: would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false`) || !strings.Contains(out, "deployment.apps/web created") {
		t.Fatalf("deployment:\n%s", out)
	}
	storetest.Eventually(t, 30*time.Second, func() error {
		evs, _, err := e.st.List(ctx, store.Events, "strict")
		if err != nil {
			return err
		}
		for _, o := range evs {
			ev := o.(*corev1.Event)
			if ev.Reason == "FailedCreate" && ev.InvolvedObject.Kind == "ReplicaSet" && strings.Contains(ev.Message, `forbidden: violates PodSecurity "restricted:latest"`) {
				return nil
			}
		}
		return fmt.Errorf("no FailedCreate event with the PodSecurity message among %d events", len(evs))
	})
	pods, _, err := e.st.List(ctx, store.Pods, "strict")
	if err != nil || len(pods) != 1 {
		t.Fatalf("pods in strict: %d (%v), want only the WASM pod", len(pods), err)
	}

	// Tightening a namespace with a privileged pod warns about it.
	priv := `apiVersion: v1
kind: Pod
metadata: {name: priv, namespace: default}
spec:
  containers: [{name: c, image: busybox, securityContext: {privileged: true}}]
`
	k(priv, "apply", "-f", "-")
	out = k("", "label", "namespace", "default", "pod-security.kubernetes.io/enforce=baseline")
	for _, want := range []string{
		`Warning: existing pods in namespace "default" violate the new PodSecurity enforce level "baseline:latest"`,
		`Warning: priv: privileged`,
		"namespace/default labeled",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("label default: want %q in\n%s", want, out)
		}
	}
	if out, err := e.kubectl(ctx, "", "label", "namespace", "default", "pod-security.kubernetes.io/audit=none"); err == nil || !strings.Contains(out, `Invalid value: "none"`) {
		t.Fatalf("an invalid level label: %v\n%s", err, out)
	}
}

// TestPodSecurityAuditAnnotations: the audit level's verdict and the
// enforced policy reach the request's audit event, under Kubernetes' keys.
func TestPodSecurityAuditAnnotations(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.st.Create(ctx, store.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "audited",
		Labels: map[string]string{"pod-security.kubernetes.io/audit": "baseline"}}}); err != nil {
		t.Fatal(err)
	}
	yes := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "audited", Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i", SecurityContext: &corev1.SecurityContext{Privileged: &yes}}}}}
	actx := k8saudit.WithAuditContext(ctx)
	if err := e.srv.reg.Admit(actx, registry.AdmissionAttributes{Operation: admissionv1.Create, Resource: store.Pods, Object: pod}); err != nil {
		t.Fatalf("audit mode refused: %v", err)
	}
	got := k8saudit.AuditContextFrom(actx).GetEventAnnotations()
	if !strings.Contains(got["pod-security.kubernetes.io/audit-violations"], `would violate PodSecurity "baseline:latest": privileged`) ||
		got["pod-security.kubernetes.io/enforce-policy"] != "privileged:latest" {
		t.Fatalf("annotations %v", got)
	}
}
