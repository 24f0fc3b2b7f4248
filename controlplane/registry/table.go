package registry

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/orca-edge/orca/controlplane/store"
)

// Column returns a table column definition (priority 0 is shown by
// kubectl get, 1 only with -o wide).
func Column(name, typ, description string, priority int32) metav1.TableColumnDefinition {
	c := metav1.TableColumnDefinition{Name: name, Type: typ, Description: description, Priority: priority}
	if name == "Name" {
		c.Format = "name"
	}
	return c
}

// NameColumn and AgeColumn are the columns every table has.
var (
	NameColumn = Column("Name", "string", "Name must be unique within a namespace.", 0)
	AgeColumn  = Column("Age", "string", "CreationTimestamp is the time the object was created.", 0)
)

// Age is the AGE cell of obj: the time since its creationTimestamp as
// kubectl prints it ("5m"), "<unknown>" when unset.
func Age(obj store.Object) string {
	ts := obj.GetCreationTimestamp()
	if ts.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(ts.Time))
}

// OrNone is s, or "<none>" when empty, as kubectl prints empty cells.
func OrNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
