package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Bind assigns pod namespace/name to node, with the semantics of the
// Kubernetes pods/binding subresource (pkg/registry/core/pod/storage,
// BindingREST): it fails with Conflict when the pod is already bound (to any
// node) or is being deleted, or when uid is set and differs from the pod's;
// it sets spec.nodeName and the PodScheduled=True condition in one
// compare-and-swap write, retried while only the revision moved (as
// GuaranteedUpdate: the first read from the watch cache when this store
// runs one, a failed check on that copy confirmed on the object read from
// NATS, at most GuaranteedUpdateMaxAttempts writes).
//
// It is GuaranteedUpdate cut to what a binding changes, as it is on the
// path of every pod the scheduler places: it reads the cached pod without
// copying it, copies only the fields it changes, encodes once and returns
// a copy of what it wrote instead of decoding it again.
// It returns the bound pod.
func (s *Store) Bind(ctx context.Context, namespace, name string, uid types.UID, node string) (*corev1.Pod, error) {
	if node == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("bind pod %s/%s: target node name is required", namespace, name))
	}
	kv, err := s.bucket(ctx, Pods)
	if err != nil {
		return nil, err
	}
	key := s.key(Pods, namespace, name)
	if checkKey("update", key) != nil {
		return nil, apierrors.NewNotFound(Pods.GroupResource(), name)
	}
	var cur *corev1.Pod // read only: the watch cache's object, or one read from NATS
	current := false
	if o, ok := s.sharedCachedObject(Pods, key).(*corev1.Pod); ok {
		cur = o
	}
	refresh := func() error {
		o, _, err := s.getKV(ctx, kv, Pods, key, namespace, name)
		if err != nil {
			return err
		}
		cur, current = o.(*corev1.Pod), true
		return nil
	}
	if cur == nil {
		if err := refresh(); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := bindable(cur, uid, node); err != nil {
			if !current { // perhaps only because the cached copy is stale
				if err := refresh(); err != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		// A shallow copy with its own Spec and conditions: the rest is
		// cur's, which is only read (Encode sets the copy's own
		// resourceVersion and kind).
		out := *cur
		out.Spec.NodeName = node
		out.Status.Conditions = slices.Clone(cur.Status.Conditions)
		SetPodCondition(&out.Status, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
		for i := range out.Status.Conditions {
			// As stored: JSON keeps whole seconds.
			if c := &out.Status.Conditions[i]; c.Type == corev1.PodScheduled {
				c.LastTransitionTime = c.LastTransitionTime.Rfc3339Copy()
			}
		}
		data, err := Encode(Pods, &out)
		if err != nil {
			return nil, err
		}
		stored, err := s.toStorage(ctx, Pods, key, data)
		if err != nil {
			return nil, err
		}
		if err := s.checkSize(Pods, &out, stored); err != nil {
			return nil, err
		}
		rev, err := ParseResourceVersion(cur.ResourceVersion)
		if err != nil {
			return nil, err
		}
		newRev, err := kv.Update(ctx, key, stored, rev)
		if err == nil {
			bound := out.DeepCopy()
			bound.ResourceVersion = strconv.FormatUint(newRev, 10)
			return bound, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("store: update %s %s/%s: %w", Pods.Kind, namespace, name, err)
		}
		if attempt >= GuaranteedUpdateMaxAttempts {
			return nil, apierrors.NewConflict(Pods.GroupResource(), name,
				fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again (still conflicting after %d attempts)", attempt))
		}
		if err := refresh(); err != nil {
			return nil, err
		}
	}
}

// bindable returns the Conflict of binding pod to node, or nil.
func bindable(pod *corev1.Pod, uid types.UID, node string) error {
	switch {
	case uid != "" && pod.UID != uid:
		return apierrors.NewConflict(Pods.GroupResource(), pod.Name, fmt.Errorf("bind pod %s/%s to node %s: pod uid %s is not %s", pod.Namespace, pod.Name, node, pod.UID, uid))
	case pod.DeletionTimestamp != nil:
		return apierrors.NewConflict(Pods.GroupResource(), pod.Name, fmt.Errorf("bind pod %s/%s to node %s: pod is being deleted", pod.Namespace, pod.Name, node))
	case pod.Spec.NodeName != "":
		return apierrors.NewConflict(Pods.GroupResource(), pod.Name, fmt.Errorf("bind pod %s/%s to node %s: pod is already assigned to node %q", pod.Namespace, pod.Name, node, pod.Spec.NodeName))
	}
	return nil
}

// SetPodCondition sets or replaces the condition of c.Type in status,
// keeping LastTransitionTime when the status did not change.
func SetPodCondition(status *corev1.PodStatus, c corev1.PodCondition) {
	now := metav1.Now()
	for i := range status.Conditions {
		old := &status.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		} else {
			c.LastTransitionTime = now
		}
		*old = c
		return
	}
	c.LastTransitionTime = now
	status.Conditions = append(status.Conditions, c)
}
