package eventttl

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func TestExpiredEventsAreDeleted(t *testing.T) {
	s := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Now()
	for name, last := range map[string]time.Time{"old": now.Add(-2 * time.Second), "fresh": now.Add(time.Hour)} {
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, CreationTimestamp: metav1.NewTime(last)},
			LastTimestamp: metav1.NewTime(last), Reason: "Test"}
		if _, err := s.Create(ctx, store.Events, ev); err != nil {
			t.Fatal(err)
		}
	}
	go New(s, time.Second).Run(ctx, 1)
	storetest.Eventually(t, 5*time.Second, func() error {
		if _, err := s.Get(ctx, store.Events, "default", "old"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("old event: %v, want NotFound", err)
		}
		return nil
	})
	if _, err := s.Get(ctx, store.Events, "default", "fresh"); err != nil {
		t.Fatalf("fresh event: %v", err)
	}
}

func TestLastSeen(t *testing.T) {
	t1, t2, t3 := time.Unix(100, 0), time.Unix(200, 0), time.Unix(300, 0)
	for _, tc := range []struct {
		ev   corev1.Event
		want time.Time
	}{
		{corev1.Event{LastTimestamp: metav1.NewTime(t1), EventTime: metav1.NewMicroTime(t2)}, t1},
		{corev1.Event{EventTime: metav1.NewMicroTime(t2), ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t3)}}, t2},
		{corev1.Event{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t3)}}, t3},
	} {
		if got := lastSeen(&tc.ev); !got.Equal(tc.want) {
			t.Errorf("lastSeen = %v, want %v", got, tc.want)
		}
	}
}
