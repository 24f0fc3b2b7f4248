package apiserver

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

// TestServiceAccountAdmission checks the ServiceAccount admission of pods:
// the default ServiceAccount (created with the namespace), a missing one
// refused as Kubernetes refuses it, imagePullSecrets taken from the
// ServiceAccount, and enforce-mountable-secrets.
func TestServiceAccountAdmission(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.must(http.StatusCreated, http.MethodPost, "/api/v1/namespaces", "application/json",
		map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "team"}}, nil)
	if _, err := e.st.Get(ctx, core.ServiceAccounts, "team", "default"); err != nil {
		t.Fatalf("a new namespace has no default ServiceAccount: %v", err)
	}
	sa := func(name string, f func(*corev1.ServiceAccount)) {
		o := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}}
		f(o)
		setServerMeta(o)
		if _, err := e.st.Create(ctx, core.ServiceAccounts, o); err != nil {
			t.Fatal(err)
		}
	}
	sa("puller", func(o *corev1.ServiceAccount) { o.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}} })
	sa("strict", func(o *corev1.ServiceAccount) {
		o.Annotations = map[string]string{enforceMountableSecretsAnnotation: "true"}
		o.Secrets = []corev1.ObjectReference{{Name: "allowed"}}
	})
	pod := func(name, sa string, f func(*corev1.PodSpec)) map[string]any {
		spec := corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "c", Image: "x"}}}
		if f != nil {
			f(&spec)
		}
		return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name}, "spec": spec}
	}
	secretEnv := func(secret string) func(*corev1.PodSpec) {
		return func(sp *corev1.PodSpec) {
			sp.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "k"}}}}
		}
	}
	cases := []struct {
		name, ns string
		body     map[string]any
		code     int
		msg      string
		check    func(*corev1.Pod) bool
	}{
		{name: "defaulted", ns: "team", body: pod("a", "", nil), code: 201,
			check: func(p *corev1.Pod) bool { return p.Spec.ServiceAccountName == "default" }},
		{name: "missing", ns: "team", body: pod("b", "ghost", nil), code: 403,
			msg: `pods \"b\" is forbidden: error looking up service account team/ghost: serviceaccount \"ghost\" not found`},
		{name: "pull secrets", ns: "team", body: pod("c", "puller", nil), code: 201,
			check: func(p *corev1.Pod) bool {
				return len(p.Spec.ImagePullSecrets) == 1 && p.Spec.ImagePullSecrets[0].Name == "regcred"
			}},
		{name: "mountable secret", ns: "team", body: pod("d", "strict", secretEnv("allowed")), code: 201},
		{name: "unmountable secret", ns: "team", body: pod("e", "strict", secretEnv("other")), code: 403,
			msg: `container c with envVar X referencing secret.secretName=\"other\" is not allowed because service account strict does not reference that secret`},
		{name: "no default yet", ns: "bare", body: pod("f", "", nil), code: 403,
			msg: `error looking up service account bare/default: serviceaccount \"default\" not found`},
	}
	bare := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bare"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
	setServerMeta(bare)
	if _, err := e.st.Create(ctx, store.Namespaces, bare); err != nil { // not through the API: no ServiceAccount
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out := e.do(http.MethodPost, "/api/v1/namespaces/"+tc.ns+"/pods", "application/json", tc.body)
			if code != tc.code || !strings.Contains(string(out), tc.msg) {
				t.Fatalf("got %d %s, want %d with %s", code, out, tc.code, tc.msg)
			}
			if tc.check != nil {
				var p corev1.Pod
				if err := json.Unmarshal(out, &p); err != nil || !tc.check(&p) {
					t.Fatalf("admitted pod %s (%v)", out, err)
				}
			}
		})
	}
}

// setServerMeta sets what the apiserver sets on create (uid,
// creationTimestamp, generation 1) on an object the test stores directly,
// status and all.
func setServerMeta(o metav1.Object) {
	o.SetUID(types.UID(uuid.NewString()))
	o.SetCreationTimestamp(metav1.Now())
	o.SetGeneration(1)
}

// TestServiceAccountAdmissionOfControllerPods checks that a pod created
// as the controllers create theirs (registry.Create, no HTTP request) goes
// through the same ServiceAccount admission as one created through the
// API: it gets "default", the ServiceAccount's pull secrets and the
// kube-api-access token volume; a missing ServiceAccount refuses it.
func TestServiceAccountAdmissionOfControllerPods(t *testing.T) {
	e := newEnv(t, withServiceAccountTokens())
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "puller"},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}}}
	setServerMeta(sa)
	if _, err := e.st.Create(ctx, core.ServiceAccounts, sa); err != nil {
		t.Fatal(err)
	}
	newPod := func(name, account string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.PodSpec{ServiceAccountName: account, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	}
	obj, err := e.srv.reg.Create(ctx, e.st, store.Pods, newPod("from-rs", ""))
	if err != nil {
		t.Fatal(err)
	}
	pod := obj.(*corev1.Pod)
	if pod.Spec.ServiceAccountName != "default" {
		t.Errorf("serviceAccountName %q, want default", pod.Spec.ServiceAccountName)
	}
	if len(pod.Spec.Volumes) != 1 || !strings.HasPrefix(pod.Spec.Volumes[0].Name, serviceAccountVolumePrefix) ||
		len(pod.Spec.Containers[0].VolumeMounts) != 1 || pod.Spec.Containers[0].VolumeMounts[0].MountPath != DefaultAPITokenMountPath {
		t.Errorf("no kube-api-access volume mounted: %+v %+v", pod.Spec.Volumes, pod.Spec.Containers[0].VolumeMounts)
	}
	obj, err = e.srv.reg.Create(ctx, e.st, store.Pods, newPod("pulls", "puller"))
	if err != nil {
		t.Fatal(err)
	}
	if ps := obj.(*corev1.Pod).Spec.ImagePullSecrets; len(ps) != 1 || ps[0].Name != "regcred" {
		t.Errorf("imagePullSecrets %v, want the ServiceAccount's regcred", ps)
	}
	if _, err := e.srv.reg.Create(ctx, e.st, store.Pods, newPod("orphan", "nobody")); err == nil || !strings.Contains(err.Error(), `serviceaccount "nobody" not found`) {
		t.Errorf("pod of a missing ServiceAccount: %v, want refused", err)
	}
}
