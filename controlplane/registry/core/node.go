package core

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Node is the nodes kind: capacity and allocatable quantities are in
// range (ValidateQuantities); spec.podCIDR(s) and spec.providerID, once
// set, never change (validateNodeUpdate); the table is kubectl's (status, roles from
// node-role.kubernetes.io/<role> labels, kubelet version, internal IP).
func Node() registry.Kind {
	return registry.Kind{
		Resource: store.Nodes,
		Status:   true,
		Validate: func(obj store.Object) field.ErrorList {
			o := obj.(*corev1.Node)
			errs := ValidateQuantities(o.Status.Capacity, field.NewPath("status", "capacity"))
			return append(errs, ValidateQuantities(o.Status.Allocatable, field.NewPath("status", "allocatable"))...)
		},
		ValidateUpdate: validateNodeUpdate,
		Columns: []metav1.TableColumnDefinition{registry.NameColumn, registry.Column("Status", "string", "The status of the node.", 0),
			registry.Column("Roles", "string", "The roles of the node.", 0), registry.AgeColumn,
			registry.Column("Version", "string", "Kubelet version reported by the node.", 0),
			registry.Column("Internal-IP", "string", "The node's internal IP.", 1)},
		Row: func(obj store.Object) []any {
			x := obj.(*corev1.Node)
			status := "Unknown"
			for _, c := range x.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						status = "Ready"
					} else {
						status = "NotReady"
					}
				}
			}
			if x.Spec.Unschedulable {
				status += ",SchedulingDisabled"
			}
			var roles []string
			for k := range x.Labels {
				if r, ok := strings.CutPrefix(k, "node-role.kubernetes.io/"); ok && r != "" {
					roles = append(roles, r)
				}
			}
			sort.Strings(roles)
			ip := ""
			for _, a := range x.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					ip = a.Address
				}
			}
			return []any{x.Name, status, registry.OrNone(strings.Join(roles, ",")), registry.Age(obj), x.Status.NodeInfo.KubeletVersion, registry.OrNone(ip)}
		},
		Fields: func(obj store.Object) fields.Set {
			return fields.Set{"spec.unschedulable": fmt.Sprint(obj.(*corev1.Node).Spec.Unschedulable)}
		},
	}
}

// validateNodeUpdate is Kubernetes' ValidateNodeUpdate rule for the
// addresses a node is given: spec.podCIDRs (and podCIDR, its first) and
// spec.providerID may be set once, from empty, and never changed after,
// so that a node cannot move itself onto another node's pod addresses
// (NodeRestriction lets a node update its own Node object).
func validateNodeUpdate(obj, old store.Object) field.ErrorList {
	n, o := obj.(*corev1.Node), old.(*corev1.Node)
	var errs field.ErrorList
	if o.Spec.PodCIDR != "" && n.Spec.PodCIDR != o.Spec.PodCIDR {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "podCIDR"), `node updates may not change podCIDR except from "" to valid`))
	}
	if len(o.Spec.PodCIDRs) > 0 {
		changed := len(n.Spec.PodCIDRs) != len(o.Spec.PodCIDRs)
		for i := 0; !changed && i < len(o.Spec.PodCIDRs); i++ {
			changed = n.Spec.PodCIDRs[i] != o.Spec.PodCIDRs[i]
		}
		if changed {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "podCIDRs"), `node updates may not change podCIDR except from "" to valid`))
		}
	}
	if o.Spec.ProviderID != "" && n.Spec.ProviderID != o.Spec.ProviderID {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "providerID"), `node updates may not change providerID except from "" to valid`))
	}
	return errs
}
