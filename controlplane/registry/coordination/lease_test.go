package coordination

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
)

func TestLease(t *testing.T) {
	holder := "edge-1"
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: "edge-1"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	registrytest.Run(t, Lease(), []registrytest.Case{
		{Name: "valid", Obj: l},
		{Name: "renewed", Old: l, Obj: l.DeepCopy()},
		{Name: "namespace required", Obj: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, Errors: []string{"FieldValueRequired:metadata.namespace"}},
	})
	registrytest.CheckTable(t, Lease(), l)
}
