package core

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// ResourceQuotas is the storage layout of core/v1 ResourceQuotas: bucket
// "resourcequotas", keys "<namespace>.<name>", short name quota.
var ResourceQuotas = store.Resource{Version: "v1", Kind: "ResourceQuota", ListKind: "ResourceQuotaList",
	Plural: "resourcequotas", Singular: "resourcequota", ShortNames: []string{"quota"}, Namespaced: true,
	New:     func() store.Object { return &corev1.ResourceQuota{} },
	NewList: func() runtime.Object { return &corev1.ResourceQuotaList{} }}

// ResourceQuota is the resourcequotas kind, as Kubernetes'
// pkg/registry/core/resourcequota: a status subresource (status.hard and
// status.used, written by quota admission and the resource quota
// controller; a create starts with an empty status, a spec update keeps
// the stored one), ValidateResourceQuota (resource names standard for
// quota or fully qualified, non-negative quantities, integers for object
// counts, scopes valid for the resources they apply to, no conflicting
// scopes, a valid scopeSelector) and kubectl's columns NAME AGE REQUEST
// LIMIT (printResourceQuota: "<resource>: <used>/<hard>" of status.hard,
// limits.* under LIMIT, the rest under REQUEST).
func ResourceQuota() registry.Kind {
	return registry.Kind{
		Resource: ResourceQuotas,
		Status:   true,
		PrepareForCreate: func(obj store.Object) {
			obj.(*corev1.ResourceQuota).Status = corev1.ResourceQuotaStatus{}
		},
		Validate: func(obj store.Object) field.ErrorList {
			q := obj.(*corev1.ResourceQuota)
			errs := ValidateResourceQuotaSpec(&q.Spec, field.NewPath("spec"))
			return append(errs, validateResourceQuotaStatus(&q.Status, field.NewPath("status"))...)
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn, registry.AgeColumn,
			registry.Column("Request", "string", "Request represents a minimum amount of cpu/memory that a container may consume.", 0),
			registry.Column("Limit", "string", "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.", 0)},
		Row: func(obj store.Object) []any {
			q := obj.(*corev1.ResourceQuota)
			names := make([]string, 0, len(q.Status.Hard))
			for n := range q.Status.Hard {
				names = append(names, string(n))
			}
			sort.Strings(names)
			var req, lim []string
			for _, n := range names {
				used, hard := q.Status.Used[corev1.ResourceName(n)], q.Status.Hard[corev1.ResourceName(n)]
				s := fmt.Sprintf("%s: %s/%s", n, used.String(), hard.String())
				if p := strings.Split(n, "."); len(p) > 1 && p[0] == "limits" {
					lim = append(lim, s)
				} else {
					req = append(req, s)
				}
			}
			return []any{q.Name, registry.Age(obj), strings.Join(req, ", "), strings.Join(lim, ", ")}
		},
	}
}

// standardQuotaResources are Kubernetes' standard quota resource names
// (pkg/apis/core/helper standardQuotaResources).
var standardQuotaResources = sets.New[corev1.ResourceName](
	corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage,
	corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory, corev1.ResourceRequestsStorage, corev1.ResourceRequestsEphemeralStorage,
	corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory, corev1.ResourceLimitsEphemeralStorage,
	corev1.ResourcePods, corev1.ResourceQuotas, corev1.ResourceServices, corev1.ResourceReplicationControllers,
	corev1.ResourceSecrets, corev1.ResourcePersistentVolumeClaims, corev1.ResourceConfigMaps,
	corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers)

// integerQuotaResources must be whole numbers (helper.IsIntegerResourceName).
var integerQuotaResources = sets.New[corev1.ResourceName](
	corev1.ResourcePods, corev1.ResourceQuotas, corev1.ResourceServices, corev1.ResourceReplicationControllers,
	corev1.ResourceSecrets, corev1.ResourcePersistentVolumeClaims, corev1.ResourceConfigMaps,
	corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers)

// podComputeScopeResources are the resources the Terminating,
// NotTerminating, NotBestEffort and PriorityClass scopes may limit;
// BestEffort limits pods only (helper.IsResourceQuotaScopeValidForResource).
var podComputeScopeResources = sets.New[corev1.ResourceName](corev1.ResourcePods,
	corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory,
	corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory)

var standardQuotaScopes = sets.New(corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating,
	corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort, corev1.ResourceQuotaScopePriorityClass,
	corev1.ResourceQuotaScopeCrossNamespacePodAffinity)

// IsStandardQuotaResourceName is helper.IsStandardQuotaResourceName: a
// standard name, a hugepages- one (or requests.hugepages-).
func IsStandardQuotaResourceName(n corev1.ResourceName) bool {
	return standardQuotaResources.Has(n) || strings.HasPrefix(string(n), corev1.ResourceHugePagesPrefix) ||
		strings.HasPrefix(string(n), corev1.DefaultResourceRequestsPrefix+corev1.ResourceHugePagesPrefix)
}

// IsIntegerQuotaResourceName reports whether n counts objects (or is an
// extended resource) and must be a whole number.
func IsIntegerQuotaResourceName(n corev1.ResourceName) bool {
	return integerQuotaResources.Has(n) || strings.HasPrefix(string(n), "count/") || isExtendedResourceName(n)
}

// isExtendedResourceName is helper.IsExtendedResourceName: a fully
// qualified name outside kubernetes.io and not requests.-prefixed.
func isExtendedResourceName(n corev1.ResourceName) bool {
	s := string(n)
	if !strings.Contains(s, "/") || strings.Contains(s, corev1.ResourceDefaultNamespacePrefix) || strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+s)) == 0
}

// validateResourceName is Kubernetes' validateResourceName: a qualified
// name; without a domain, a standard one.
func validateResourceName(n corev1.ResourceName, p *field.Path, standard func(corev1.ResourceName) bool, msg string) field.ErrorList {
	var errs field.ErrorList
	for _, m := range validation.IsQualifiedName(string(n)) {
		errs = append(errs, field.Invalid(p, n, m))
	}
	if len(errs) == 0 && !strings.Contains(string(n), "/") && !standard(n) {
		errs = append(errs, field.Invalid(p, n, msg))
	}
	return errs
}

// validateQuotaList checks a quota's resource list: names as
// ValidateResourceQuotaResourceName, values as ValidateResourceQuantityValue.
func validateQuotaList(list corev1.ResourceList, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for k, v := range list {
		rp := p.Key(string(k))
		errs = append(errs, validateResourceName(k, rp, IsStandardQuotaResourceName, "must be a standard resource for quota")...)
		errs = append(errs, validateQuantityValue(k, v, rp, IsIntegerQuotaResourceName)...)
	}
	return errs
}

// validateQuantityValue is ValidateResourceQuantityValue: non-negative,
// whole for integer resources.
func validateQuantityValue(k corev1.ResourceName, v resource.Quantity, p *field.Path, integer func(corev1.ResourceName) bool) field.ErrorList {
	if v.Sign() < 0 {
		return field.ErrorList{field.Invalid(p, v.String(), "must be greater than or equal to 0")}
	}
	if integer(k) && v.MilliValue()%1000 != 0 {
		return field.ErrorList{field.Invalid(p, v.String(), "must be an integer")}
	}
	return nil
}

// ValidateResourceQuotaSpec is Kubernetes' ValidateResourceQuotaSpec:
// spec.hard names and values, spec.scopes (each standard, each valid for
// every standard resource of spec.hard: BestEffort only for pods, the
// others for pods and compute; BestEffort with NotBestEffort or
// Terminating with NotTerminating conflict) and spec.scopeSelector.
func ValidateResourceQuotaSpec(spec *corev1.ResourceQuotaSpec, p *field.Path) field.ErrorList {
	errs := validateQuotaList(spec.Hard, p.Child("hard"))
	if len(spec.Scopes) > 0 {
		sp := p.Child("scopes")
		seen := sets.New[corev1.ResourceQuotaScope]()
		for _, sc := range spec.Scopes {
			if !standardQuotaScopes.Has(sc) {
				errs = append(errs, field.Invalid(sp, spec.Scopes, "unsupported scope"))
			}
			for k := range spec.Hard {
				if IsStandardQuotaResourceName(k) && !scopeValidForResource(sc, k) {
					errs = append(errs, field.Invalid(sp, spec.Scopes, "unsupported scope applied to resource"))
				}
			}
			seen.Insert(sc)
		}
		if seen.HasAll(corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort) ||
			seen.HasAll(corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating) {
			errs = append(errs, field.Invalid(sp, spec.Scopes, "conflicting scopes"))
		}
	}
	if sel := spec.ScopeSelector; sel != nil {
		sp := p.Child("scopeSelector", "matchExpressions")
		for i, req := range sel.MatchExpressions {
			ip := sp.Index(i)
			if !standardQuotaScopes.Has(req.ScopeName) {
				errs = append(errs, field.Invalid(ip.Child("scopeName"), req.ScopeName, "unsupported scope"))
			}
			switch req.Operator {
			case corev1.ScopeSelectorOpIn, corev1.ScopeSelectorOpNotIn:
				if len(req.Values) == 0 {
					errs = append(errs, field.Required(ip.Child("values"), "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector"))
				}
			case corev1.ScopeSelectorOpExists, corev1.ScopeSelectorOpDoesNotExist:
				if len(req.Values) != 0 {
					errs = append(errs, field.Invalid(ip.Child("values"), req.Values, "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector"))
				}
			default:
				errs = append(errs, field.Invalid(ip.Child("operator"), req.Operator, "not a valid selector operator"))
			}
			switch req.ScopeName {
			case corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating, corev1.ResourceQuotaScopeBestEffort,
				corev1.ResourceQuotaScopeNotBestEffort, corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
				if req.Operator != corev1.ScopeSelectorOpExists {
					errs = append(errs, field.Invalid(ip.Child("operator"), req.Operator,
						"must be 'Exist' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity"))
				}
			}
			for k := range spec.Hard {
				if IsStandardQuotaResourceName(k) && !scopeValidForResource(req.ScopeName, k) {
					errs = append(errs, field.Invalid(ip.Child("scopeName"), req.ScopeName, "unsupported scope applied to resource"))
				}
			}
		}
	}
	return errs
}

func scopeValidForResource(sc corev1.ResourceQuotaScope, k corev1.ResourceName) bool {
	switch sc {
	case corev1.ResourceQuotaScopeBestEffort:
		return k == corev1.ResourcePods || k == "count/pods"
	case corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating, corev1.ResourceQuotaScopeNotBestEffort,
		corev1.ResourceQuotaScopePriorityClass, corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return podComputeScopeResources.Has(k) || k == "count/pods"
	}
	return false
}

func validateResourceQuotaStatus(st *corev1.ResourceQuotaStatus, p *field.Path) field.ErrorList {
	return append(validateQuotaList(st.Hard, p.Child("hard")), validateQuotaList(st.Used, p.Child("used"))...)
}
