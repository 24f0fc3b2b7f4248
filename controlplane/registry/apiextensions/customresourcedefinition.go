// Package apiextensions is the registry of the apiextensions.k8s.io API
// group: the CustomResourceDefinition kind (this file's strategy), the
// translation of an established CRD into run-time kinds of its custom
// resources (customresource.go, schema.go), and the controller that
// accepts names, establishes CRDs, adds and removes their kinds in the
// registry and deletes their custom resources when a CRD is deleted
// (controller.go), as the Kubernetes apiextensions-apiserver's naming,
// establishing and finalizer controllers.
package apiextensions

import (
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// CustomResourceDefinitions is the storage layout of
// apiextensions.k8s.io/v1 CustomResourceDefinitions: one cluster-scoped
// bucket, "customresourcedefinitions".
var CustomResourceDefinitions = store.Resource{Group: apiextensionsv1.GroupName, Version: "v1",
	Kind: "CustomResourceDefinition", ListKind: "CustomResourceDefinitionList",
	Plural: "customresourcedefinitions", Singular: "customresourcedefinition", ShortNames: []string{"crd", "crds"},
	New:     func() store.Object { return &apiextensionsv1.CustomResourceDefinition{} },
	NewList: func() runtime.Object { return &apiextensionsv1.CustomResourceDefinitionList{} }}

// Kinds returns the kinds of the apiextensions.k8s.io group, in
// discovery order.
func Kinds() []registry.Kind {
	return []registry.Kind{CustomResourceDefinition()}
}

// CustomResourceDefinition is the strategy of CustomResourceDefinitions,
// as Kubernetes' registry/customresourcedefinition/strategy.go: cluster
// scoped, a status subresource, generation bumped on spec changes, scheme
// defaults (singular, listKind, conversion None) and the storage version
// always in status.storedVersions, ValidateCustomResourceDefinition on
// every write. A delete marks the CRD (deletionTimestamp, the
// customresourcecleanup.apiextensions.k8s.io finalizer, condition
// Terminating) and the controller deletes its custom resources before the
// CRD goes, as the CRD REST storage's Delete and the finalizer
// controller.
func CustomResourceDefinition() registry.Kind {
	return registry.Kind{
		Resource:   CustomResourceDefinitions,
		Status:     true,
		Generation: true,
		PrepareForCreate: func(obj store.Object) {
			crd := obj.(*apiextensionsv1.CustomResourceDefinition)
			crd.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
		},
		Default: func(obj store.Object) {
			crd := obj.(*apiextensionsv1.CustomResourceDefinition)
			apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
			for _, v := range crd.Spec.Versions {
				if v.Storage && !apihelpers.IsStoredVersion(crd, v.Name) {
					crd.Status.StoredVersions = append(crd.Status.StoredVersions, v.Name)
				}
			}
		},
		Validate: func(obj store.Object) field.ErrorList {
			return ValidateCustomResourceDefinition(obj.(*apiextensionsv1.CustomResourceDefinition))
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			return ValidateCustomResourceDefinitionUpdate(obj.(*apiextensionsv1.CustomResourceDefinition), old.(*apiextensionsv1.CustomResourceDefinition))
		},
		Columns: []metav1.TableColumnDefinition{
			{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
			{Name: "Created At", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
		},
		Row: func(obj store.Object) []any {
			return []any{obj.GetName(), obj.GetCreationTimestamp().UTC().Format(time.RFC3339)}
		},
		Finalizing: func(obj store.Object) bool {
			// Until the controller has deleted its custom resources
			// (it then removes the finalizer).
			return apihelpers.CRDHasFinalizer(obj.(*apiextensionsv1.CustomResourceDefinition), apiextensionsv1.CustomResourceCleanupFinalizer) ||
				obj.GetDeletionTimestamp() == nil
		},
		PrepareForDelete: func(obj store.Object) {
			crd := obj.(*apiextensionsv1.CustomResourceDefinition)
			if !apihelpers.CRDHasFinalizer(crd, apiextensionsv1.CustomResourceCleanupFinalizer) {
				crd.Finalizers = append(crd.Finalizers, apiextensionsv1.CustomResourceCleanupFinalizer)
			}
			apihelpers.SetCRDCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{
				Type: apiextensionsv1.Terminating, Status: apiextensionsv1.ConditionTrue, Reason: "InstanceDeletionPending",
				Message: "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
			})
		},
	}
}
