package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/controllers/clusterroleaggregation"
	"github.com/orca-edge/orca/controlplane/pki"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	regrbac "github.com/orca-edge/orca/controlplane/registry/rbac"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// rbacEnv is an env with the ClusterRole aggregation controller running
// (so view, edit and admin hold their rules, as under orca-server) and
// users with their own client certificates.
type rbacEnv struct {
	*env
}

func newRBACEnv(t *testing.T) *rbacEnv {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	roles := store.NewInformer(e.st, regrbac.ClusterRoles)
	go roles.Run(ctx)
	go clusterroleaggregation.New(e.st, builtin.New(), roles).Run(ctx, 1)
	storetest.Eventually(t, 10*time.Second, func() error {
		var view rbacv1.ClusterRole
		if code, out := e.do("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/view", "", nil); code != 200 {
			return fmt.Errorf("view: %d %s", code, out)
		} else if err := json.Unmarshal(out, &view); err != nil || len(view.Rules) == 0 {
			return fmt.Errorf("view not aggregated yet: %v", err)
		}
		return nil
	})
	return &rbacEnv{env: e}
}

// bind binds ClusterRole role to user in namespace ("" = cluster-wide),
// as the admin.
func (e *rbacEnv) bind(namespace, name, role, user string) {
	e.t.Helper()
	subjects := []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: user}}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}
	if namespace == "" {
		e.must(201, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", "application/json",
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: ref, Subjects: subjects}, nil)
		return
	}
	e.must(201, "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/"+namespace+"/rolebindings", "application/json",
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: ref, Subjects: subjects}, nil)
}

// as sends a request with kp's certificate (and extra headers, pairs).
func (e *rbacEnv) as(kp *pki.KeyPair, method, path string, body any, headers ...string) (int, metav1.Status, []byte) {
	e.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			e.t.Fatal(err)
		}
		r = strings.NewReader(string(b))
	}
	req, err := http.NewRequest(method, e.url+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := e.sec.HTTPClient(kp).Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var st metav1.Status
	_ = json.Unmarshal(out, &st)
	return resp.StatusCode, st, out
}

// eventuallyCode polls until a request as kp answers want (RBAC's
// informers follow the bindings the test writes).
func (e *rbacEnv) eventuallyCode(kp *pki.KeyPair, want int, method, path string, body any) {
	e.t.Helper()
	storetest.Eventually(e.t, 10*time.Second, func() error {
		if code, _, out := e.as(kp, method, path, body); code != want {
			return fmt.Errorf("%s %s: %d, want %d: %s", method, path, code, want, out)
		}
		return nil
	})
}

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}
}

// TestRBACViewUserCannotWrite: a user bound to view in a namespace reads
// there, gets Kubernetes' 403 when writing, and nothing elsewhere; a user
// with no binding gets 403 on everything but discovery and the reviews.
func TestRBACViewUserCannotWrite(t *testing.T) {
	e := newRBACEnv(t)
	jane, nobody := e.sec.User("jane", "devs"), e.sec.User("nobody")
	e.bind("default", "jane-view", "view", "jane")
	e.eventuallyCode(jane, 200, "GET", "/api/v1/namespaces/default/pods", nil)

	code, st, out := e.as(jane, "POST", "/api/v1/namespaces/default/configmaps", configMap("x"))
	want := `configmaps is forbidden: User "jane" cannot create resource "configmaps" in API group "" in the namespace "default"`
	if code != 403 || st.Reason != metav1.StatusReasonForbidden || st.Message != want || st.Details == nil || st.Details.Kind != "configmaps" {
		t.Fatalf("view user create: %d %s\nwant 403 %s", code, out, want)
	}
	if code, _, out := e.as(jane, "GET", "/api/v1/namespaces/default/secrets", nil); code != 403 {
		t.Errorf("view user lists secrets: %d %s", code, out)
	}
	if code, st, _ := e.as(jane, "GET", "/api/v1/namespaces/kube-system/pods", nil); code != 403 ||
		st.Message != `pods is forbidden: User "jane" cannot list resource "pods" in API group "" in the namespace "kube-system"` {
		t.Errorf("view user in another namespace: %d %q", code, st.Message)
	}
	if code, st, _ := e.as(jane, "GET", "/api/v1/nodes/n1", nil); code != 403 ||
		st.Message != `nodes "n1" is forbidden: User "jane" cannot get resource "nodes" in API group "" at the cluster scope` {
		t.Errorf("view user gets a node: %d %q", code, st.Message)
	}
	for _, p := range []string{"/api", "/apis", "/api/v1", "/version", "/healthz"} {
		if code, _, out := e.as(nobody, "GET", p, nil); code != 200 {
			t.Errorf("unbound user GET %s: %d %s (system:discovery/public-info-viewer)", p, code, out)
		}
	}
	if code, st, _ := e.as(nobody, "GET", "/api/v1/namespaces/default/pods", nil); code != 403 || !strings.Contains(st.Message, `User "nobody" cannot list`) {
		t.Errorf("unbound user lists pods: %d %q", code, st.Message)
	}
	// Through kubectl, the error reads as Kubernetes'.
	kc := e.sec.Kubeconfig(e.url, jane)
	out2, err := runKubectl(t, kubectlPath, kc, "create", "configmap", "y", "--from-literal=a=b")
	if err == nil || !strings.Contains(out2, want) {
		t.Errorf("kubectl create as view user: %v\n%s", err, out2)
	}
	out2, err = runKubectl(t, kubectlPath, kc, "get", "secrets")
	if want := `Error from server (Forbidden): secrets is forbidden: User "jane" cannot list resource "secrets" in API group "" in the namespace "default"`; err == nil || strings.TrimSpace(out2) != want {
		t.Errorf("kubectl get secrets as view user: %v\n%s\nwant %s", err, out2, want)
	}
	if out, err := runKubectl(t, kubectlPath, kc, "get", "pods"); err != nil {
		t.Errorf("kubectl get pods as view user: %v\n%s", err, out)
	}
}

// runKubectl runs the kubectl at path with kubeconfig kc.
func runKubectl(t *testing.T, path, kc string, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{"--kubeconfig=" + kc, "--cache-dir=" + filepath.Join(home, "cache"), "--request-timeout=20s"}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+kc)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestKubectlAuthCanI runs `kubectl auth can-i` (SelfSubjectAccessReview),
// `can-i --list` (SelfSubjectRulesReview) and `can-i --as` (impersonation)
// with every kubectl from 1.27 to 1.33 (the whole set of questions with
// the default kubectl, a yes, a no and the list with the others).
func TestKubectlAuthCanI(t *testing.T) {
	e := newRBACEnv(t)
	jane := e.sec.User("jane")
	e.bind("default", "jane-edit", "edit", "jane")
	e.eventuallyCode(jane, 200, "GET", "/api/v1/namespaces/default/secrets", nil)
	janeKC := e.sec.Kubeconfig(e.url, jane)
	for name, path := range kubectlVersions() {
		t.Run(name, func(t *testing.T) {
			canI := func(kc string, want string, args ...string) {
				t.Helper()
				out, err := runKubectl(t, path, kc, append([]string{"auth", "can-i"}, args...)...)
				lines := strings.Split(strings.TrimSpace(out), "\n") // a warning may come first
				if got := lines[len(lines)-1]; got != want || (err == nil) != (want == "yes") {
					t.Errorf("kubectl %s auth can-i %v: %q (%v), want %s", name, args, out, err, want)
				}
			}
			canI(janeKC, "yes", "create", "deployments.apps", "-n", "default")
			canI(e.kubeconfig, "no", "get", "secrets", "-n", "kube-system", "--as", "jane")
			if name == "default" {
				canI(janeKC, "yes", "get", "pods/log", "-n", "default")
				canI(janeKC, "no", "create", "deployments.apps", "-n", "kube-system")
				canI(janeKC, "no", "create", "rolebindings.rbac.authorization.k8s.io", "-n", "default")
				canI(janeKC, "no", "get", "nodes")
				canI(janeKC, "yes", "get", "/healthz")
				canI(e.kubeconfig, "yes", "*", "*")
				canI(e.kubeconfig, "yes", "create", "deployments.apps", "-n", "default", "--as", "jane")
			}
			out, err := runKubectl(t, path, janeKC, "auth", "can-i", "--list", "-n", "default")
			if err != nil || !strings.Contains(out, "deployments.apps") || !strings.Contains(out, "selfsubjectaccessreviews.authorization.k8s.io") ||
				!strings.Contains(out, "[/healthz]") {
				t.Errorf("kubectl %s auth can-i --list: %v\n%s", name, err, out)
			}
		})
	}
}

// TestImpersonationHeaders: the admin acts as jane (and is refused what
// jane may not do); jane may not impersonate anyone.
func TestImpersonationHeaders(t *testing.T) {
	e := newRBACEnv(t)
	jane := e.sec.User("jane")
	e.bind("default", "jane-view", "view", "jane")
	e.eventuallyCode(jane, 200, "GET", "/api/v1/namespaces/default/pods", nil)

	if code, _, out := e.as(e.sec.Admin, "GET", "/api/v1/namespaces/default/pods", nil, "Impersonate-User", "jane"); code != 200 {
		t.Errorf("admin as jane lists pods: %d %s", code, out)
	}
	code, st, _ := e.as(e.sec.Admin, "POST", "/api/v1/namespaces/default/configmaps", configMap("x"), "Impersonate-User", "jane")
	if code != 403 || !strings.HasPrefix(st.Message, `configmaps is forbidden: User "jane" cannot create`) {
		t.Errorf("admin as jane creates: %d %q", code, st.Message)
	}
	// Impersonating a group grants the group's rights.
	if code, _, out := e.as(e.sec.Admin, "POST", "/api/v1/namespaces/default/configmaps", configMap("y"), "Impersonate-User", "jane", "Impersonate-Group", "system:masters"); code != 201 {
		t.Errorf("admin as jane in system:masters creates: %d %s", code, out)
	}
	// Whoami: the SelfSubjectAccessReview of an impersonated request is the impersonated user's.
	ssar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps", Namespace: "default"}}}
	var got authorizationv1.SelfSubjectAccessReview
	code, _, out := e.as(e.sec.Admin, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", ssar, "Impersonate-User", "jane")
	if err := json.Unmarshal(out, &got); code != 201 || err != nil || got.Status.Allowed {
		t.Errorf("SSAR as jane: %d %s", code, out)
	}
	code, st, _ = e.as(jane, "GET", "/api/v1/namespaces/default/pods", nil, "Impersonate-User", "system:admin")
	if want := `users "system:admin" is forbidden: User "jane" cannot impersonate resource "users" in API group "" at the cluster scope`; code != 403 || st.Message != want {
		t.Errorf("jane impersonates the admin: %d %q, want 403 %q", code, st.Message, want)
	}
	code, _, _ = e.as(jane, "GET", "/api/v1/namespaces/default/pods", nil, "Impersonate-User", "system:serviceaccount:default:default")
	if code != 403 {
		t.Errorf("view user impersonates a ServiceAccount: %d, want 403", code)
	}
	if code, _, out := e.as(e.sec.Admin, "GET", "/api/v1/namespaces/default/pods", nil, "Impersonate-Group", "devs"); code != 400 {
		t.Errorf("group without user: %d %s, want 400", code, out)
	}
}

// TestRBACEscalation: a namespace admin may write roles and bindings with
// what they hold, but not grant more (Kubernetes' escalation check), nor
// touch cluster-wide RBAC.
func TestRBACEscalation(t *testing.T) {
	e := newRBACEnv(t)
	jane := e.sec.User("jane")
	e.bind("default", "jane-admin", "admin", "jane")
	e.eventuallyCode(jane, 200, "GET", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", nil)
	// admin holds secrets through the aggregated edit rules, which the
	// aggregation controller may merge after admin's own (a race CI lost).
	e.eventuallyCode(jane, 200, "GET", "/api/v1/namespaces/default/secrets", nil)

	role := func(name string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
		return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	}
	secrets := rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"secrets"}}
	nodes := rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}}
	if code, _, out := e.as(jane, "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", role("ok", secrets)); code != 201 {
		t.Errorf("role with held rules: %d %s", code, out)
	}
	code, st, _ := e.as(jane, "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", role("more", secrets, nodes))
	if want := `roles.rbac.authorization.k8s.io "more" is forbidden: user "jane" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
{APIGroups:[""], Resources:["nodes"], Verbs:["get"]}`; code != 403 || st.Message != want {
		t.Errorf("escalating role: %d %q\nwant %q", code, st.Message, want)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "b"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "joe"}}}
	if code, st, _ := e.as(jane, "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", rb); code != 403 || !strings.Contains(st.Message, "is attempting to grant RBAC permissions not currently held") {
		t.Errorf("binding cluster-admin: %d %q", code, st.Message)
	}
	rb.RoleRef.Name = "view"
	if code, _, out := e.as(jane, "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", rb); code != 201 {
		t.Errorf("binding view: %d %s", code, out)
	}
	if code, _, _ := e.as(jane, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "x"},
		RoleRef: rb.RoleRef, Subjects: rb.Subjects}); code != 403 {
		t.Errorf("namespace admin creates a ClusterRoleBinding: %d", code)
	}
	// A SubjectAccessReview (admin only) sees jane's rights.
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "jane",
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "rolebindings", Namespace: "default"}}}
	var got authorizationv1.SubjectAccessReview
	e.must(201, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", "application/json", sar, &got)
	if !got.Status.Allowed || !strings.Contains(got.Status.Reason, `RoleBinding "jane-admin/default" of ClusterRole "admin" to User "jane"`) {
		t.Errorf("SubjectAccessReview: %+v", got.Status)
	}
	if code, _, _ := e.as(jane, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar); code != 403 {
		t.Errorf("jane creates a SubjectAccessReview: %d, want 403", code)
	}
	lsar := &authorizationv1.LocalSubjectAccessReview{Spec: sar.Spec}
	if code, _, out := e.as(jane, "POST", "/apis/authorization.k8s.io/v1/namespaces/default/localsubjectaccessreviews", lsar); code != 201 || !strings.Contains(string(out), `"allowed":true`) {
		t.Errorf("namespace admin's LocalSubjectAccessReview: %d %s", code, out)
	}
}

// allowGroup grants members of group every verb on the core group's
// resources (a ClusterRole and ClusterRoleBinding written as the admin),
// for tests whose users are not admins, and waits until RBAC applies it.
func (e *env) allowGroup(group string) {
	e.t.Helper()
	role := "test:" + group
	e.must(201, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", "application/json", &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"*"}, APIGroups: []string{""}, Resources: []string{"*"}}}}, nil)
	e.must(201, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", "application/json", &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: []rbacv1.Subject{{Kind: "Group", APIGroup: rbacv1.GroupName, Name: group}}}, nil)
	probe := e.sec.HTTPClient(e.sec.User("probe:"+group, group))
	storetest.Eventually(e.t, 10*time.Second, func() error {
		resp, err := probe.Get(e.url + "/api/v1/namespaces/default/configmaps")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("group %s: %d", group, resp.StatusCode)
		}
		return nil
	})
}
