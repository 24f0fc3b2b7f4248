package core

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
)

func TestEvent(t *testing.T) {
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web.1"}, Type: corev1.EventTypeNormal, Reason: "Scheduled",
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "web"}, Source: corev1.EventSource{Component: "default-scheduler"}, Message: " bound "}
	registrytest.Run(t, Event(), []registrytest.Case{
		{Name: "valid", Obj: ev},
		{Name: "bad name", Obj: &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "-x"}}, Errors: []string{"FieldValueInvalid:metadata.name"}},
	})
	registrytest.CheckTable(t, Event(), ev)
	if row := Event().Row(ev); row[3] != "pod/web" || row[4] != "bound" || row[6] != int32(1) {
		t.Errorf("row %v", row)
	}
	if f := Event().Fields(ev); f["involvedObject.name"] != "web" || f["reason"] != "Scheduled" || f["source"] != "default-scheduler" {
		t.Errorf("fields %v", f)
	}
}
