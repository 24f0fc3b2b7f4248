package events_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/events"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func TestRecorderAggregatesRepeats(t *testing.T) {
	s := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	created, err := s.Create(ctx, store.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "u1"}})
	if err != nil {
		t.Fatal(err)
	}
	r := events.New(s, "kubelet", "edge-1")
	go r.Run(ctx)
	r.Event(created, "spec.containers{web}", corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container")
	r.Event(created, "spec.containers{web}", corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container")
	r.Event(created, "", corev1.EventTypeNormal, "Scheduled", "Successfully assigned default/web to edge-1")
	storetest.Eventually(t, 5*time.Second, func() error {
		objs, _, err := s.List(ctx, store.Events, "default")
		if err != nil {
			return err
		}
		got := map[string]int32{}
		for _, o := range objs {
			ev := o.(*corev1.Event)
			if ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.UID != "u1" || ev.Source.Component != "kubelet" || ev.Source.Host != "edge-1" {
				return fmt.Errorf("event %+v", ev)
			}
			got[ev.Reason] += ev.Count
		}
		if len(objs) != 2 || got["BackOff"] != 2 || got["Scheduled"] != 1 {
			return fmt.Errorf("%d events, counts %v; want 2 events, BackOff counted twice", len(objs), got)
		}
		return nil
	})
}
