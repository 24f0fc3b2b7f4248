package core

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Event is the core/v1 events kind: selectable by the involved object,
// reason, source and type (as pkg/registry/core/event's GetAttrs); its
// table is kubectl get events' (last seen, type, reason, object, message).
func Event() registry.Kind {
	return registry.Kind{
		Resource: store.Events,
		Columns: []metav1.TableColumnDefinition{registry.Column("Last Seen", "string", "Time when this Event was last seen.", 0),
			registry.Column("Type", "string", "Type of this event (Normal, Warning).", 0), registry.Column("Reason", "string", "Why the action was taken.", 0),
			registry.Column("Object", "string", "The object this Event is about.", 0), registry.Column("Message", "string", "A human-readable description of the status of this operation.", 0),
			registry.Column("Source", "string", "The component reporting this event.", 1), registry.Column("Count", "integer", "The number of times this event has occurred.", 1),
			registry.NameColumn},
		Row: func(obj store.Object) []any {
			x := obj.(*corev1.Event)
			last := x.LastTimestamp.Time
			if last.IsZero() {
				last = x.EventTime.Time
			}
			if last.IsZero() {
				last = x.CreationTimestamp.Time
			}
			seen := "<unknown>"
			if !last.IsZero() {
				seen = duration.HumanDuration(time.Since(last))
			}
			object := strings.ToLower(x.InvolvedObject.Kind) + "/" + x.InvolvedObject.Name
			source := x.Source.Component
			if x.Source.Host != "" {
				source += ", " + x.Source.Host
			}
			return []any{seen, x.Type, x.Reason, object, strings.TrimSpace(x.Message), registry.OrNone(source), max(x.Count, 1), x.Name}
		},
		Fields: func(obj store.Object) fields.Set {
			o := obj.(*corev1.Event)
			return fields.Set{
				"involvedObject.kind":            o.InvolvedObject.Kind,
				"involvedObject.namespace":       o.InvolvedObject.Namespace,
				"involvedObject.name":            o.InvolvedObject.Name,
				"involvedObject.uid":             string(o.InvolvedObject.UID),
				"involvedObject.apiVersion":      o.InvolvedObject.APIVersion,
				"involvedObject.resourceVersion": o.InvolvedObject.ResourceVersion,
				"involvedObject.fieldPath":       o.InvolvedObject.FieldPath,
				"reason":                         o.Reason,
				"reportingComponent":             o.ReportingController,
				"source":                         o.Source.Component,
				"type":                           o.Type,
			}
		},
	}
}
