package apiserver

import (
	"net/http"
	"testing"
)

// TestAttackKindsBadInput: RBAC, PodDisruptionBudget and ServiceAccount
// objects a careless client sends get 4xx Statuses, never a 5xx.
func TestAttackKindsBadInput(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		path, body string
		want       int
	}{
		{"/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", `{"metadata":{"name":"rb"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Pod","name":"x"}}`, 422},
		{"/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", `{"metadata":{"name":"rb2"},"roleRef":{"apiGroup":"evil.io","kind":"Role","name":""}}`, 422},
		{"/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", `{"metadata":{"name":"rb3"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"x"},"subjects":[{"kind":"Nope","name":""}]}`, 422},
		{"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", `{"metadata":{"name":"crb"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"x"}}`, 422},
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles", `{"metadata":{"name":"cr"},"rules":[{"verbs":[]}]}`, 422},
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles", `{"metadata":{"name":"cr2"},"aggregationRule":{"clusterRoleSelectors":[{"matchExpressions":[{"key":"a","operator":"Bogus"}]}]}}`, 422},
		{"/apis/policy/v1/namespaces/default/poddisruptionbudgets", `{"metadata":{"name":"p1"},"spec":{"selector":{"matchExpressions":[{"key":"a","operator":"Bogus"}]},"minAvailable":1}}`, 422},
		{"/apis/policy/v1/namespaces/default/poddisruptionbudgets", `{"metadata":{"name":"p2"},"spec":{"minAvailable":1,"maxUnavailable":1}}`, 422},
		{"/apis/policy/v1/namespaces/default/poddisruptionbudgets", `{"metadata":{"name":"p3"},"spec":{"minAvailable":"150%"}}`, 422},
		{"/apis/policy/v1/namespaces/default/poddisruptionbudgets", `{"metadata":{"name":"p4"},"spec":{"minAvailable":-1}}`, 422},
		{"/apis/policy/v1/namespaces/missing/poddisruptionbudgets", `{"metadata":{"name":"p5"},"spec":{"minAvailable":1}}`, 404},
		{"/api/v1/namespaces/default/serviceaccounts", `{"metadata":{"name":"Bad_SA"}}`, 422},
		{"/api/v1/namespaces/default/pods", `{"metadata":{"name":"p"},"spec":{"serviceAccountName":"nosuch","containers":[{"name":"c","image":"x"}]}}`, 0},
		{"/api/v1/namespaces/default/pods", `{"metadata":{"name":"p2"},"spec":{"serviceAccountName":"Bad_Name!","containers":[{"name":"c","image":"x"}]}}`, 0},
	} {
		code, out := e.do(http.MethodPost, tc.path, "application/json", tc.body)
		t.Logf("%s %s: %d %.250s", tc.path, tc.body, code, out)
		if code >= 500 || (tc.want != 0 && code != tc.want) {
			t.Errorf("%s %s: %d, want %d", tc.path, tc.body, code, tc.want)
		}
	}
}
