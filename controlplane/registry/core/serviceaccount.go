package core

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// ServiceAccounts is the storage layout of core/v1 ServiceAccounts:
// bucket "serviceaccounts", keys "<namespace>.<name>", short name sa.
var ServiceAccounts = store.Resource{Version: "v1", Kind: "ServiceAccount", ListKind: "ServiceAccountList",
	Plural: "serviceaccounts", Singular: "serviceaccount", ShortNames: []string{"sa"}, Namespaced: true,
	New:     func() store.Object { return &corev1.ServiceAccount{} },
	NewList: func() runtime.Object { return &corev1.ServiceAccountList{} }}

// ServiceAccount is the serviceaccounts kind, as Kubernetes'
// pkg/registry/core/serviceaccount: names are DNS-1123 subdomains, each
// secrets entry keeps only its name, and kubectl's columns (NAME,
// SECRETS, AGE), and the token subresource (TokenRequest, served by
// the apiserver). Every namespace has a "default" one (the
// serviceaccount controller); pods without spec.serviceAccountName run
// as it (the apiserver's ServiceAccount admission).
func ServiceAccount() registry.Kind {
	return registry.Kind{
		Resource: ServiceAccounts,
		Subresources: []registry.Subresource{
			{Name: "token", Group: "authentication.k8s.io", Version: "v1", Kind: "TokenRequest", Verbs: metav1.Verbs{"create"}},
		},
		PrepareForCreate: cleanSecretReferences,
		PrepareForUpdate: func(obj, _ store.Object) { cleanSecretReferences(obj) },
		Columns:          serviceAccountColumns,
		Row: func(obj store.Object) []any {
			return []any{obj.GetName(), int64(len(obj.(*corev1.ServiceAccount).Secrets)), registry.Age(obj)}
		},
	}
}

// DefaultServiceAccountName is the ServiceAccount every namespace has and
// a pod without spec.serviceAccountName runs as, as Kubernetes'.
const DefaultServiceAccountName = "default"

// cleanSecretReferences keeps only the name of each secrets entry, as
// Kubernetes' ServiceAccount strategy.
func cleanSecretReferences(obj store.Object) {
	sa := obj.(*corev1.ServiceAccount)
	for i, s := range sa.Secrets {
		sa.Secrets[i] = corev1.ObjectReference{Name: s.Name}
	}
}

// serviceAccountColumns are kubectl's columns for ServiceAccounts.
var serviceAccountColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	{Name: "Secrets", Type: "string", Description: corev1.ServiceAccount{}.SwaggerDoc()["secrets"]},
	{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
}
