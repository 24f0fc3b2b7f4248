package podsecurity_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/pod-security-admission/api"

	"github.com/orca-edge/orca/controlplane/auth/podsecurity"
)

// cluster is the state the admission reads: namespaces, pods and
// RuntimeClass handlers.
type cluster struct {
	ns   map[string]*corev1.Namespace
	pods map[string][]*corev1.Pod
	rcs  map[string]string
}

func newAdmission(t testing.TB, c *cluster, conf string) *podsecurity.Admission {
	t.Helper()
	cfg := podsecurity.Config{
		Namespace: func(_ context.Context, name string) (*corev1.Namespace, error) {
			if n, ok := c.ns[name]; ok {
				return n, nil
			}
			return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
		},
		Pods: func(_ context.Context, ns string) ([]*corev1.Pod, error) {
			return append([]*corev1.Pod(nil), c.pods[ns]...), nil
		},
		RuntimeClassHandler: func(_ context.Context, name string) (string, bool) {
			h, ok := c.rcs[name]
			return h, ok
		},
	}
	if conf != "" {
		p := filepath.Join(t.TempDir(), "admission.yaml")
		if err := os.WriteFile(p, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		pc, err := podsecurity.LoadConfigFile(p)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Configuration = pc
	}
	a, err := podsecurity.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func ns(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func restricted(level string) map[string]string {
	return map[string]string{api.EnforceLevelLabel: level}
}

// plainPod has no securityContext: baseline, not restricted.
func plainPod(namespace, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
}

func privilegedPod(namespace, name string) *corev1.Pod {
	p := plainPod(namespace, name)
	yes := true
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &yes}
	return p
}

// restrictedPod meets the restricted profile.
func restrictedPod(namespace, name string) *corev1.Pod {
	p := plainPod(namespace, name)
	yes, no := true, false
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &yes, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	return p
}

func wasmPod(namespace, name string) *corev1.Pod {
	p := plainPod(namespace, name)
	rc := "wasm"
	p.Spec.RuntimeClassName = &rc
	return p
}

func createPod(pod *corev1.Pod) *api.AttributesRecord {
	return &api.AttributesRecord{Name: pod.Name, Namespace: pod.Namespace, Kind: corev1.SchemeGroupVersion.WithKind("Pod"),
		Resource: corev1.SchemeGroupVersion.WithResource("pods"), Operation: admissionv1.Create, Object: pod}
}

func TestPodsAgainstNamespaceLevels(t *testing.T) {
	c := &cluster{ns: map[string]*corev1.Namespace{
		"open":   ns("open", nil),
		"base":   ns("base", restricted("baseline")),
		"strict": ns("strict", restricted("restricted")),
		"warned": ns("warned", map[string]string{api.WarnLevelLabel: "restricted", api.AuditLevelLabel: "baseline"}),
	}, rcs: map[string]string{"wasm": "wasm", "fake-wasm": "runc"}}
	a := newAdmission(t, c, "")
	hostPathWasm := wasmPod("strict", "wasm-hostpath")
	hostPathWasm.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
	privilegedWasm := wasmPod("strict", "wasm-privileged")
	yes := true
	privilegedWasm.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &yes}
	fakeWasm := wasmPod("strict", "fake")
	rc := "fake-wasm"
	fakeWasm.Spec.RuntimeClassName = &rc
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		denied  string // substring of the 403 message; "" = admitted
		warning string
	}{
		{"privileged namespace admits a privileged pod", privilegedPod("open", "p"), "", ""},
		{"baseline refuses privileged", privilegedPod("base", "p"),
			`pods "p" is forbidden: violates PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)`, ""},
		{"baseline admits a plain pod", plainPod("base", "p"), "", ""},
		{"restricted refuses a plain pod", plainPod("strict", "p"),
			`violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")`, ""},
		{"restricted admits a restricted pod", restrictedPod("strict", "p"), "", ""},
		{"restricted admits a WASM pod without securityContext", wasmPod("strict", "w"), "", ""},
		{"a WASM pod's securityContext does not count", privilegedWasm, "", ""},
		{"a WASM pod may not mount the node's /", hostPathWasm, `violates PodSecurity "restricted:latest": restricted volume types (volume "root" uses restricted volume type "hostPath")`, ""},
		{"a RuntimeClass with another handler is not sandboxed", fakeWasm, `violates PodSecurity "restricted:latest"`, ""},
		{"warn only warns", plainPod("warned", "p"), "",
			`would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := a.Validate(context.Background(), createPod(tc.pod))
			if tc.denied == "" {
				if res.Err != nil {
					t.Fatalf("refused: %v", res.Err)
				}
			} else if !apierrors.IsForbidden(res.Err) || !strings.Contains(res.Err.Error(), tc.denied) {
				t.Fatalf("got %v, want a 403 with %q", res.Err, tc.denied)
			}
			if tc.warning == "" && len(res.Warnings) > 0 {
				t.Fatalf("unexpected warnings %q", res.Warnings)
			}
			if tc.warning != "" && (len(res.Warnings) != 1 || !strings.HasPrefix(res.Warnings[0], tc.warning)) {
				t.Fatalf("warnings %q, want %q", res.Warnings, tc.warning)
			}
		})
	}
	// The audit annotation of the warned namespace's baseline audit level:
	// a privileged pod would violate it.
	res := a.Validate(context.Background(), createPod(privilegedPod("warned", "p")))
	if !strings.Contains(res.AuditAnnotations[api.AuditViolationsAnnotationKey], `would violate PodSecurity "baseline:latest": privileged`) {
		t.Fatalf("audit annotations %v", res.AuditAnnotations)
	}
}

func TestUpdatesSubresourcesAndTemplates(t *testing.T) {
	c := &cluster{ns: map[string]*corev1.Namespace{"strict": ns("strict", map[string]string{api.EnforceLevelLabel: "restricted", api.WarnLevelLabel: "restricted"})}}
	a := newAdmission(t, c, "")
	old := plainPod("strict", "p")
	// An update that changes no image is not evaluated (the pod predates
	// the label); one that changes an image is.
	relabeled := old.DeepCopy()
	relabeled.Labels = map[string]string{"a": "b"}
	up := &api.AttributesRecord{Name: "p", Namespace: "strict", Resource: corev1.SchemeGroupVersion.WithResource("pods"), Operation: admissionv1.Update, Object: relabeled, OldObject: old}
	if res := a.Validate(context.Background(), up); res.Err != nil {
		t.Fatalf("label update refused: %v", res.Err)
	}
	reimaged := old.DeepCopy()
	reimaged.Spec.Containers[0].Image = "busybox:2"
	up.Object = reimaged
	if res := a.Validate(context.Background(), up); !apierrors.IsForbidden(res.Err) {
		t.Fatalf("image update: %v", res.Err)
	}
	up.Subresource = "status"
	if res := a.Validate(context.Background(), up); res.Err != nil {
		t.Fatalf("status update refused: %v", res.Err)
	}
	// A Deployment's template only warns.
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "strict", Name: "web"},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: plainPod("", "").Spec}}}
	res := a.Validate(context.Background(), &api.AttributesRecord{Name: "web", Namespace: "strict",
		Resource: appsv1.SchemeGroupVersion.WithResource("deployments"), Operation: admissionv1.Create, Object: d})
	if res.Err != nil || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], `would violate PodSecurity "restricted:latest"`) {
		t.Fatalf("deployment: err %v warnings %q", res.Err, res.Warnings)
	}
}

func TestNamespaceLabels(t *testing.T) {
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-1", Controller: func() *bool { b := true; return &b }()}
	p1, p2, p3 := privilegedPod("team", "web-1"), privilegedPod("team", "web-2"), plainPod("team", "job")
	p1.OwnerReferences, p2.OwnerReferences = []metav1.OwnerReference{owner}, []metav1.OwnerReference{owner}
	c := &cluster{pods: map[string][]*corev1.Pod{"team": {p1, p2, p3, wasmPod("team", "w")}}, rcs: map[string]string{"wasm": "wasm"}}
	a := newAdmission(t, c, "")
	attrs := func(op admissionv1.Operation, labels, old map[string]string) *api.AttributesRecord {
		r := &api.AttributesRecord{Name: "team", Namespace: "team", Kind: corev1.SchemeGroupVersion.WithKind("Namespace"),
			Resource: corev1.SchemeGroupVersion.WithResource("namespaces"), Operation: op, Object: ns("team", labels)}
		if old != nil {
			r.OldObject = ns("team", old)
		}
		return r
	}
	if res := a.Validate(context.Background(), attrs(admissionv1.Create, map[string]string{api.EnforceLevelLabel: "strict"}, nil)); !apierrors.IsInvalid(res.Err) ||
		!strings.Contains(res.Err.Error(), `metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict"`) {
		t.Fatalf("invalid level: %v", res.Err)
	}
	if res := a.Validate(context.Background(), attrs(admissionv1.Create, map[string]string{api.EnforceVersionLabel: "v1.x"}, nil)); !apierrors.IsInvalid(res.Err) {
		t.Fatalf("invalid version: %v", res.Err)
	}
	// Tightening to baseline warns about the privileged pods (once for the
	// two of one ReplicaSet); the plain and WASM pods are fine.
	res := a.Validate(context.Background(), attrs(admissionv1.Update, restricted("baseline"), map[string]string{}))
	want := []string{
		`existing pods in namespace "team" violate the new PodSecurity enforce level "baseline:latest"`,
		`web-1 (and 1 other pod): privileged`,
	}
	if res.Err != nil || len(res.Warnings) != len(want) || res.Warnings[0] != want[0] || res.Warnings[1] != want[1] {
		t.Fatalf("got err %v warnings %q, want %q", res.Err, res.Warnings, want)
	}
	// Relaxing does not check pods.
	res = a.Validate(context.Background(), attrs(admissionv1.Update, restricted("privileged"), restricted("baseline")))
	if res.Err != nil || len(res.Warnings) != 0 {
		t.Fatalf("relaxing: %v %q", res.Err, res.Warnings)
	}
}

func TestConfigurationFileAndExemptions(t *testing.T) {
	c := &cluster{ns: map[string]*corev1.Namespace{"kube-system": ns("kube-system", nil), "apps": ns("apps", nil)}}
	// k3s's file shape: an AdmissionConfiguration with the plugin inline.
	a := newAdmission(t, c, `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      enforce-version: latest
    exemptions:
      usernames: [ops]
      namespaces: [kube-system]
`)
	if res := a.Validate(context.Background(), createPod(privilegedPod("apps", "p"))); !apierrors.IsForbidden(res.Err) {
		t.Fatalf("the default level baseline did not apply: %v", res.Err)
	}
	hp := wasmPod("apps", "w")
	hp.Spec.Volumes = []corev1.Volume{{Name: "etc", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}}}
	if res := a.Validate(context.Background(), createPod(hp)); !apierrors.IsForbidden(res.Err) || !strings.Contains(res.Err.Error(), `hostPath volumes (volume "etc")`) {
		t.Fatalf("a WASM pod with a hostPath volume under baseline: %v", res.Err)
	}
	if res := a.Validate(context.Background(), createPod(privilegedPod("kube-system", "p"))); res.Err != nil || res.AuditAnnotations[api.ExemptionReasonAnnotationKey] != "namespace" {
		t.Fatalf("exempt namespace: %v %v", res.Err, res.AuditAnnotations)
	}
	byOps := createPod(privilegedPod("apps", "p"))
	byOps.Username = "ops"
	if res := a.Validate(context.Background(), byOps); res.Err != nil {
		t.Fatalf("exempt user: %v", res.Err)
	}
	for _, bad := range []string{
		"apiVersion: pod-security.admission.config.k8s.io/v1\nkind: PodSecurityConfiguration\ndefaults: {enforce: strictest}\n",
		"apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  path: missing.yaml\n",
		"apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugin: []\n",
	} {
		p := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(p, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := podsecurity.LoadConfigFile(p); err == nil {
			t.Errorf("accepted:\n%s", bad)
		}
	}
}
