// Package events records core/v1 Events, as client-go's record package
// does for Kubernetes components, written through the store: the node agent
// (source "kubelet"), the scheduler ("default-scheduler") and the
// controllers ("deployment-controller", ...) use it.
package events

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/store"
)

// queueSize is how many events may wait for each writer of a Recorder;
// more are dropped (events are best effort, as in Kubernetes).
const queueSize = 256

// Sink is where a Recorder writes Events, as client-go's record.EventSink:
// Create a new Event, Update one it wrote before (its resourceVersion
// set; Conflict or NotFound when it moved). Errors are apierrors
// StatusErrors. The node agent's sink goes through its API (the relay),
// so a node needs only create and update on events, as Kubernetes' node
// rules grant.
type Sink interface {
	Create(ctx context.Context, ev *corev1.Event) (*corev1.Event, error)
	Update(ctx context.Context, ev *corev1.Event) (*corev1.Event, error)
}

// StoreSink writes Events to a store directly.
func StoreSink(s *store.Store) Sink { return storeSink{s} }

type storeSink struct{ s *store.Store }

func (k storeSink) Create(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	obj, err := k.s.Create(ctx, store.Events, ev)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Event), nil
}

func (k storeSink) Update(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	obj, err := k.s.Update(ctx, store.Events, ev)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Event), nil
}

// seenMax is how many aggregated Events a Recorder remembers; past it the
// memory is cleared and repeats start new Events.
const seenMax = 4096

// Recorder writes Events asynchronously, aggregating repeats of the same
// reason and message about the same object into one Event whose count
// grows. Call Run to write; Event never blocks. Safe for concurrent use.
type Recorder struct {
	sink      Sink
	component string // source.component: "kubelet", "default-scheduler"
	host      string // source.host: the node, for the agent
	// ch has one queue per writer; an Event goes to the queue of its
	// aggregation key's hash, so repeats are written in order by one
	// writer.
	ch   []chan *corev1.Event
	seed maphash.Seed

	mu   sync.Mutex               // guards seen
	seen map[string]*corev1.Event // aggregation key -> the Event as last stored
}

// New returns a recorder writing to s as component (on host, "" if none).
func New(s *store.Store, component, host string) *Recorder {
	return NewWithSink(StoreSink(s), component, host)
}

// NewWithSink returns a recorder writing to sink as component (on host,
// "" if none).
func NewWithSink(sink Sink, component, host string) *Recorder {
	return NewWithWriters(sink, component, host, 1)
}

// NewWithWriters is NewWithSink with writers Events written at once
// (at least 1), each writer with its own queue of queueSize: a component
// that records an Event per pod at hundreds a second, as the scheduler's
// Scheduled, would otherwise see most of them dropped while one write
// waits for the store's fsync; concurrent writes share it (group commit).
func NewWithWriters(sink Sink, component, host string, writers int) *Recorder {
	r := &Recorder{sink: sink, component: component, host: host, ch: make([]chan *corev1.Event, max(writers, 1)),
		seed: maphash.MakeSeed(), seen: map[string]*corev1.Event{}}
	for i := range r.ch {
		r.ch[i] = make(chan *corev1.Event, queueSize)
	}
	return r
}

// aggregationKey is what repeats of one Event share.
func aggregationKey(ev *corev1.Event) string {
	return string(ev.InvolvedObject.UID) + "\x00" + ev.InvolvedObject.FieldPath + "\x00" + ev.Reason + "\x00" + ev.Message
}

// Event records an Event of type typ (corev1.EventTypeNormal or Warning)
// about obj; fieldPath (may be "") names a part of it, such as
// "spec.containers{web}". The Event lives in obj's namespace ("default"
// for cluster-scoped objects, as Kubernetes does). obj's apiVersion and
// kind must be set, as they are on objects read from the store.
func (r *Recorder) Event(obj store.Object, fieldPath, typ, reason, msg string) {
	now := metav1.Now()
	gvk := obj.GetObjectKind().GroupVersionKind()
	ns := obj.GetNamespace()
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s.%x", obj.GetName(), time.Now().UnixNano())},
		InvolvedObject: corev1.ObjectReference{Kind: gvk.Kind, APIVersion: gvk.GroupVersion().String(), Namespace: obj.GetNamespace(),
			Name: obj.GetName(), UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(), FieldPath: fieldPath},
		Reason: reason, Message: msg, Type: typ,
		Source:         corev1.EventSource{Component: r.component, Host: r.host},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: r.component, ReportingInstance: r.host,
	}
	ch := r.ch[0]
	if len(r.ch) > 1 {
		ch = r.ch[maphash.String(r.seed, aggregationKey(ev))%uint64(len(r.ch))]
	}
	select {
	case ch <- ev:
	default:
	}
}

// Run writes queued events, with the recorder's writers, until ctx ends.
func (r *Recorder) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, ch := range r.ch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case ev := <-ch:
					r.write(ctx, ev)
				}
			}
		}()
	}
	wg.Wait()
}

func (r *Recorder) write(ctx context.Context, ev *corev1.Event) {
	key := aggregationKey(ev)
	r.mu.Lock()
	last := r.seen[key]
	r.mu.Unlock()
	if last != nil {
		next := last.DeepCopy()
		next.Count++
		next.LastTimestamp = ev.LastTimestamp
		stored, err := r.sink.Update(ctx, next)
		if err == nil {
			r.remember(key, stored)
			return
		}
		if !apierrors.IsNotFound(err) {
			// A lost race only loses one count; forget the stale copy.
			r.mu.Lock()
			delete(r.seen, key)
			r.mu.Unlock()
			return
		}
	}
	ev.UID = types.UID(uuid.NewString())
	ev.CreationTimestamp = metav1.Now()
	stored, err := r.sink.Create(ctx, ev)
	if err != nil {
		return
	}
	r.remember(key, stored)
}

func (r *Recorder) remember(key string, ev *corev1.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) >= seenMax {
		clear(r.seen)
	}
	r.seen[key] = ev
}
