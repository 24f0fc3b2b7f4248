package events_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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

// TestRecorderWithWritersKeepsEveryEvent records a burst of 600 Events,
// more than one writer's queue holds, on 8 writers, with repeats among
// them: every one is written, and the repeats of one object still make
// one Event whose count grows (they go to the same writer).
func TestRecorderWithWritersKeepsEveryEvent(t *testing.T) {
	s := storetest.NewGroupCommitStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const pods, repeats = 300, 2
	var objs []store.Object
	for i := range pods {
		objs = append(objs, &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("p-", i), UID: types.UID(fmt.Sprint("u-", i))}})
	}
	r := events.NewWithWriters(events.StoreSink(s), "default-scheduler", "", 8)
	for range repeats {
		for _, o := range objs {
			r.Event(o, "", corev1.EventTypeNormal, "Scheduled", "Successfully assigned "+o.GetName())
		}
	}
	go r.Run(ctx)
	storetest.Eventually(t, 30*time.Second, func() error {
		list, _, err := s.List(ctx, store.Events, "default")
		if err != nil {
			return err
		}
		counts := map[types.UID]int32{}
		for _, o := range list {
			ev := o.(*corev1.Event)
			counts[ev.InvolvedObject.UID] += ev.Count
		}
		if len(list) != pods {
			return fmt.Errorf("%d Events, want %d (one per pod)", len(list), pods)
		}
		for uid, n := range counts {
			if n != repeats {
				return fmt.Errorf("pod %s counted %d times, want %d", uid, n, repeats)
			}
		}
		return nil
	})
}
