package policy

import (
	"fmt"
	"slices"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/registrytest"
)

func TestPodDisruptionBudget(t *testing.T) {
	k := PodDisruptionBudget()
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	num := func(n int32) *intstr.IntOrString { v := intstr.FromInt32(n); return &v }
	pdb := func(name string, minA, maxU *intstr.IntOrString, sel *metav1.LabelSelector) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: minA, MaxUnavailable: maxU, Selector: sel}}
	}
	web := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	bogus := policyv1.UnhealthyPodEvictionPolicyType("Sometimes")
	tests := []struct {
		name string
		obj  *policyv1.PodDisruptionBudget
		want []string
	}{
		{"min int", pdb("web", num(2), nil, web), nil},
		{"max percent", pdb("web", nil, pct("25%"), web), nil},
		{"no bound, empty selector", pdb("web", nil, nil, &metav1.LabelSelector{}), nil},
		{"path segment name", pdb("Web_1", num(1), nil, web), nil},
		{"slash in name", pdb("a/b", num(1), nil, web), []string{"FieldValueInvalid:metadata.name"}},
		{"both bounds", pdb("web", num(1), num(1), web), []string{"FieldValueInvalid:spec"}},
		{"negative", pdb("web", num(-1), nil, web), []string{"FieldValueInvalid:spec.minAvailable"}},
		{"over 100%", pdb("web", nil, pct("101%"), web), []string{"FieldValueInvalid:spec.maxUnavailable"}},
		{"not a percent", pdb("web", pct("half"), nil, web), []string{"FieldValueInvalid:spec.minAvailable"}},
		{"bad selector", pdb("web", num(1), nil, &metav1.LabelSelector{MatchLabels: map[string]string{"a b": "c"}}), []string{"FieldValueInvalid:spec.selector.matchLabels"}},
		{"policy", func() *policyv1.PodDisruptionBudget {
			p := pdb("web", num(1), nil, web)
			p.Spec.UnhealthyPodEvictionPolicy = &bogus
			return p
		}(), []string{"FieldValueNotSupported:spec.unhealthyPodEvictionPolicy"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.obj.Status.DisruptionsAllowed = 5 // clients may not set status
			if got := registrytest.ErrorFields(t, registry.BeforeCreate(&k, tc.obj)); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if tc.obj.Status.DisruptionsAllowed != 0 {
				t.Fatalf("status kept on create: %+v", tc.obj.Status)
			}
		})
	}

	// The spec may change (generation bumps); a status write is checked.
	old := registrytest.Stored(t, &k, pdb("web", num(2), nil, web)).(*policyv1.PodDisruptionBudget)
	next := old.DeepCopy()
	next.Spec.MinAvailable = num(3)
	out, err := registry.BeforeUpdate(&k, "", next, old)
	if err != nil || out.GetGeneration() != 2 {
		t.Fatalf("spec update: generation %d, %v", out.GetGeneration(), err)
	}
	st := old.DeepCopy()
	st.Status.DisruptionsAllowed = -1
	if _, err := registry.BeforeUpdate(&k, "status", st, old); !slices.Equal(registrytest.ErrorFields(t, err), []string{"FieldValueInvalid:status.disruptionsAllowed"}) {
		t.Fatalf("negative status: %v", err)
	}

	old.Status.DisruptionsAllowed = 1
	if got := fmt.Sprint(k.TableRow(old)[:4]); got != "[web 2 N/A 1]" {
		t.Fatalf("row %s", got)
	}
	if cols := k.TableColumns(); len(cols) != 5 || cols[3].Name != "Allowed Disruptions" {
		t.Fatalf("columns %+v", cols)
	}
	registrytest.CheckTable(t, k, old, pdb("max", nil, pct("10%"), web))
}
