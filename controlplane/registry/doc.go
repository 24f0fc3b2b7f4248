// Package registry says what each API kind means, in one place that the
// apiserver and the controllers both use: Kubernetes' registry-per-kind
// shape (pkg/registry/<group>/<kind>/strategy.go), one Kind value per
// kind, one file per kind under registry/<group>/ (core, apps,
// coordination, node, discovery), each group exporting Kinds().
//
// # Kind
//
// A Kind embeds the kind's store.Resource (bucket layout and discovery
// names: Group, Version, Kind, ListKind, Plural, Singular, ShortNames,
// Namespaced, New, NewList) and adds its strategy. Every field may be left
// zero; zero means "nothing kind-specific":
//
//   - Categories, Verbs (nil: all eight), NameValidation (nil: DNS-1123
//     subdomain): discovery and metadata rules.
//   - Status (a status subresource: main-resource writes keep the stored
//     status, /status writes change only status), Scale (Get/Set of
//     replicas and the selector string: autoscaling/v1 Scale), Subresources
//     (others, listed by discovery; those with Update are PUT-able
//     generically, as namespaces/finalize; the rest are served by the
//     apiserver's connectors: pods' log, exec, attach, portforward,
//     binding), Generation (bump metadata.generation when anything but
//     metadata and status changes).
//   - Default, PrepareForCreate, PrepareForUpdate, Validate,
//     ValidateUpdate: the strategy proper. Default runs after the
//     PrepareFor* on every write and must be idempotent; metadata
//     (ValidateObjectMeta) is validated generically.
//   - Columns and Row (server-side tables; nil: Name, Age), Fields
//     (selectable fields beyond metadata.name/namespace; the keys of
//     Fields(New()) are the supported field labels).
//   - GracePeriod (graceful delete: pods), NoDependents (no
//     foregroundDeletion finalizer: pods), PrepareForDelete and Finalizing
//     (namespaces: Terminating while spec.finalizers remain), AdmitDelete
//     (immortal namespaces).
//
// The behaviour ported into each kind is named in its file (Kubernetes'
// pkg/apis/<group>/v1/defaults.go, pkg/apis/<group>/validation,
// pkg/registry/<group>/<kind>, pkg/printers/internalversion), as the
// apiserver's type switches had it before.
//
// # Writes
//
// BeforeCreate (PrepareCreate then ValidateCreate: uid, creationTimestamp,
// generation 1, generateName, PrepareForCreate, Default, validation as a
// 422 Invalid Status) and BeforeUpdate (PrepareUpdate then ValidateUpdate:
// system metadata kept, status/subresource rules, Default, generation,
// validation) are what every write goes through. The apiserver calls the
// two halves with its admission in between (ClusterIP and nodePort
// allocation); the controllers call Registry.Create,
// Registry.GuaranteedUpdate, GuaranteedUpdateStatus and
// GuaranteedUpdateSubresource, the same rules over the store. Deletes go
// through Registry.Delete at the API and in the controllers alike
// (preconditions, propagation finalizers, graceful deletion, kind
// finalization), and an update that leaves a marked object without
// finalizers deletes it (ShouldDeleteDuringUpdate).
//
// Each kind's file has a table-driven test over registrytest.Run and
// registrytest.CheckTable.
//
// # Registry
//
// A Registry holds the kinds in discovery order. Add and Remove work at run
// time (CustomResourceDefinitions) and every method is safe for concurrent
// use; Changed tells loops that keep per-kind state (informers, OpenAPI)
// to re-read All. There is no package-level registry: main builds one
// (builtin.New) and passes it to the apiserver and the controllers.
package registry
