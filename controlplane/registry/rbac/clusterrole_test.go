package rbac

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestClusterRole(t *testing.T) {
	role := func(rules []rbacv1.PolicyRule, agg *rbacv1.AggregationRule) *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:view"}, Rules: rules, AggregationRule: agg}
	}
	tests := []struct {
		name string
		obj  *rbacv1.ClusterRole
		want []string
	}{
		{"non-resource URL", role([]rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz", "/version"}}}, nil), nil},
		{"URL and resources", role([]rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}, Resources: []string{"pods"}}}, nil),
			[]string{"FieldValueInvalid:rules[0].nonResourceURLs"}},
		{"aggregation", role(nil, &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"agg": "view"}}}}), nil},
		{"empty aggregation", role(nil, &rbacv1.AggregationRule{}), []string{"FieldValueRequired:aggregationRule.clusterRoleSelectors"}},
		{"bad selector", role(nil, &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}}}),
			[]string{"FieldValueInvalid:aggregationRule.clusterRoleSelectors[0]", "FieldValueInvalid:aggregationRule.clusterRoleSelectors[0].matchExpressions[0].operator"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := create(t, ClusterRole(), tc.obj); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if tc.obj.Namespace != "" {
				t.Fatalf("cluster-scoped object kept namespace %q", tc.obj.Namespace)
			}
		})
	}
}
