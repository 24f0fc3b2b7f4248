package apiserver

import (
	"regexp"
	"strings"
	"testing"
)

const kindsManifest = `apiVersion: v1
kind: ServiceAccount
metadata: {name: builder, namespace: default}
secrets: [{name: builder-token}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  maxUnavailable: 25%
  selector: {matchLabels: {app: web}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader, namespace: default}
rules: [{apiGroups: [""], resources: [pods], verbs: [get, list, watch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:viewer"}
rules: [{nonResourceURLs: [/healthz], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: read-pods, namespace: default}
roleRef: {kind: Role, name: pod-reader}
subjects:
- {kind: User, name: jane}
- {kind: ServiceAccount, name: builder, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: viewers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:viewer"}
subjects: [{kind: Group, name: devs}]
`

// TestKubectlNewKinds applies a ServiceAccount, a PodDisruptionBudget and
// the four RBAC kinds with the real kubectl (1.32 and 1.27, with its
// client-side validation against /openapi/v2), and checks kubectl get's
// columns, explain, the default ServiceAccount and a refused binding.
func TestKubectlNewKinds(t *testing.T) {
	e := newEnv(t)
	apply := e.mustKubectl(kindsManifest, "apply", "-f", "-")
	for _, want := range []string{"serviceaccount/builder created", "poddisruptionbudget.policy/web created", "role.rbac.authorization.k8s.io/pod-reader created",
		"clusterrole.rbac.authorization.k8s.io/system:viewer created", "rolebinding.rbac.authorization.k8s.io/read-pods created",
		"clusterrolebinding.rbac.authorization.k8s.io/viewers created"} {
		if !strings.Contains(apply, want) {
			t.Fatalf("apply: missing %q:\n%s", want, apply)
		}
	}
	// Again with 1.27. A PDB (selector patchStrategy replace) and bindings
	// whose subjects' apiGroup the server defaults come out "configured",
	// as against Kubernetes.
	out, err := e.kubectlAt(t.Context(), "/usr/lib/google-cloud-sdk/bin/kubectl.1.27", kindsManifest, "apply", "-f", "-")
	if err != nil || strings.Count(out, "unchanged") != 3 || strings.Count(out, "configured") != 3 {
		t.Fatalf("kubectl 1.27 apply: %v\n%s", err, out)
	}
	cases := []struct {
		args []string
		want string // a regexp over the output
	}{
		{[]string{"get", "sa"}, `(?m)^NAME\s+SECRETS\s+AGE\n(builder\s+1\s+\S+\n)?default\s+0\s+\S+`},
		{[]string{"get", "sa", "builder"}, `(?m)^builder\s+1\s+`},
		{[]string{"get", "pdb"}, `(?m)^NAME\s+MIN AVAILABLE\s+MAX UNAVAILABLE\s+ALLOWED DISRUPTIONS\s+AGE\nweb\s+N/A\s+25%\s+0\s+`},
		{[]string{"get", "roles"}, `(?m)^NAME\s+CREATED AT\npod-reader\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`},
		{[]string{"get", "clusterrole", "system:viewer"}, `(?m)^system:viewer\s+\d{4}-`},
		{[]string{"get", "rolebinding", "-o", "wide"}, `(?m)^NAME\s+ROLE\s+AGE\s+USERS\s+GROUPS\s+SERVICEACCOUNTS\nread-pods\s+Role/pod-reader\s+\S+\s+jane\s+default/builder`},
		{[]string{"get", "clusterrolebinding", "viewers"}, `(?m)^viewers\s+ClusterRole/system:viewer\s+\S+$`},
		{[]string{"explain", "pdb.spec.maxUnavailable"}, `(?s)FIELD:\s+maxUnavailable.*evictions`},
		{[]string{"explain", "rolebinding.roleRef"}, `(?s)FIELD:\s+roleRef.*RoleRef`},
		{[]string{"api-resources", "--api-group=rbac.authorization.k8s.io"}, `(?m)^clusterrolebindings\s+rbac.authorization.k8s.io/v1\s+false\s+ClusterRoleBinding`},
	}
	for _, tc := range cases {
		out := e.mustKubectl("", tc.args...)
		if !regexp.MustCompile(tc.want).MatchString(out) {
			t.Errorf("kubectl %s:\n%s\nwant /%s/", strings.Join(tc.args, " "), out, tc.want)
		}
	}
	// roleRef is immutable; an unsupported subject kind is refused.
	bad := strings.Replace(kindsManifest[strings.Index(kindsManifest, "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding"):], "name: pod-reader}", "name: other}", 1)
	bad = bad[:strings.Index(bad, "---")]
	out, err = e.kubectl(t.Context(), bad, "apply", "-f", "-")
	if err == nil || !strings.Contains(out, "roleRef: Invalid value") || !strings.Contains(out, "cannot change roleRef") {
		t.Fatalf("roleRef change: %v\n%s", err, out)
	}
}
