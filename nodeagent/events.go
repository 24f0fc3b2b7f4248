package nodeagent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/store"
)

// eventQueue is how many events may wait to be written; more are dropped
// (events are best effort, as in Kubernetes).
const eventQueue = 256

// recorder writes core/v1 Events about pods, as the kubelet's event
// recorder (source component "kubelet", host = node): asynchronously, and
// aggregating repeats of the same reason and message for the same object
// into one Event whose count grows.
type recorder struct {
	s    *store.Store
	node string
	ch   chan *corev1.Event

	mu   sync.Mutex        // guards seen
	seen map[string]string // aggregation key -> Event name
}

func newRecorder(s *store.Store, node string) *recorder {
	return &recorder{s: s, node: node, ch: make(chan *corev1.Event, eventQueue), seen: map[string]string{}}
}

// event records an Event of type typ (corev1.EventTypeNormal or Warning)
// about container (may be "") of pod.
func (r *recorder) event(pod *corev1.Pod, container, typ, reason, msg string) {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: fmt.Sprintf("%s.%x", pod.Name, time.Now().UnixNano())},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion},
		Reason: reason, Message: msg, Type: typ,
		Source:         corev1.EventSource{Component: "kubelet", Host: r.node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "kubelet", ReportingInstance: r.node,
	}
	if container != "" {
		ev.InvolvedObject.FieldPath = "spec.containers{" + container + "}"
	}
	select {
	case r.ch <- ev:
	default:
	}
}

// run writes queued events until ctx ends.
func (r *recorder) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-r.ch:
			r.write(ctx, ev)
		}
	}
}

func (r *recorder) write(ctx context.Context, ev *corev1.Event) {
	key := string(ev.InvolvedObject.UID) + "\x00" + ev.InvolvedObject.FieldPath + "\x00" + ev.Reason + "\x00" + ev.Message
	r.mu.Lock()
	name, seen := r.seen[key]
	r.mu.Unlock()
	if seen {
		obj, err := r.s.Get(ctx, store.Events, ev.Namespace, name)
		if err == nil {
			old := obj.(*corev1.Event).DeepCopy()
			old.Count++
			old.LastTimestamp = ev.LastTimestamp
			if _, err := r.s.Update(ctx, store.Events, old); err == nil || !apierrors.IsNotFound(err) {
				return // a lost race only loses one count
			}
		}
	}
	ev.UID = types.UID(uuid.NewString())
	ev.CreationTimestamp = metav1.Now()
	if _, err := r.s.Create(ctx, store.Events, ev); err != nil {
		return
	}
	r.mu.Lock()
	if len(r.seen) > 4096 {
		clear(r.seen)
	}
	r.seen[key] = ev.Name
	r.mu.Unlock()
}
