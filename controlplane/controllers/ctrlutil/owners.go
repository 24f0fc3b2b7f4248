package ctrlutil

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/store"
)

// Owners are the objects of one kind, as an informer holds them, that
// control other objects through a controller ownerReference and adopt
// the orphans their selector matches: ReplicaSets of pods, Deployments of
// ReplicaSets. Its methods find them as kube-controller-manager's
// controllers do (resolveControllerRef, getPodReplicaSets and the like).
type Owners struct {
	// Informer holds the owners.
	Informer *store.Informer
	// Kind is the owners' group, version and kind; an ownerReference
	// to any other does not resolve.
	Kind schema.GroupVersionKind
	// Selector returns an owner's spec.selector.
	Selector func(owner store.Object) *metav1.LabelSelector
}

// Resolve returns the key ("namespace/name") of the owner ref points to,
// if ref is of Owners' kind and the informer holds that owner with ref's
// uid (not one of the same name made again).
func (o Owners) Resolve(ns string, ref *metav1.OwnerReference) (string, bool) {
	if ref == nil || ref.Kind != o.Kind.Kind || ref.APIVersion != o.Kind.GroupVersion().String() {
		return "", false
	}
	owner, ok := o.Informer.Get(ns, ref.Name)
	if !ok || owner.GetUID() != ref.UID {
		return "", false
	}
	return store.KeyOf(owner), true
}

// Matching returns the keys of the owners in namespace ns whose selector
// is valid, not empty and matches set (the candidates for adopting an
// orphan with those labels).
func (o Owners) Matching(ns string, set map[string]string) []string {
	var keys []string
	for _, owner := range o.Informer.List(ns, nil) {
		sel, err := metav1.LabelSelectorAsSelector(o.Selector(owner))
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(set)) {
			keys = append(keys, store.KeyOf(owner))
		}
	}
	return keys
}

// PodHandler returns the pod event handlers of a controller that creates
// and deletes the pods of its owners, recording them in exp, as the
// ReplicaSet and DaemonSet controllers' addPod, updatePod and deletePod:
//   - a pod's controlling owner is enqueued on every change; a creation is
//     observed when the pod is added, a deletion when it gets a
//     deletionTimestamp (graceful deletion, so a replacement is made at
//     once) and when it goes (Expectations.DeletionObserved counts it
//     once where ExpectDeletions named it, twice otherwise, as the
//     DaemonSet controller's ControllerExpectations do);
//   - an orphan with labels enqueues every owner matching it (Matching);
//   - a pod whose controller changed enqueues the former one too;
//   - an update that does not change the resourceVersion is ignored.
func (o Owners) PodHandler(q workqueue.TypedRateLimitingInterface[string], exp *Expectations) store.Handler {
	enqueueMatching := func(pod *corev1.Pod) {
		if len(pod.Labels) == 0 {
			return
		}
		for _, key := range o.Matching(pod.Namespace, pod.Labels) {
			q.Add(key)
		}
	}
	deletePod := func(obj store.Object) {
		pod := obj.(*corev1.Pod)
		if key, ok := o.Resolve(pod.Namespace, metav1.GetControllerOfNoCopy(pod)); ok {
			exp.DeletionObserved(key, pod.UID)
			q.Add(key)
		}
	}
	return store.Handler{
		OnAdd: func(obj store.Object) {
			pod := obj.(*corev1.Pod)
			if pod.DeletionTimestamp != nil {
				deletePod(obj)
				return
			}
			ref := metav1.GetControllerOfNoCopy(pod)
			if key, ok := o.Resolve(pod.Namespace, ref); ok {
				exp.CreationObserved(key)
				q.Add(key)
				return
			}
			if ref == nil {
				enqueueMatching(pod)
			}
		},
		OnUpdate: func(oldObj, newObj store.Object) {
			oldPod, pod := oldObj.(*corev1.Pod), newObj.(*corev1.Pod)
			if pod.ResourceVersion == oldPod.ResourceVersion {
				return
			}
			oldRef, newRef := metav1.GetControllerOfNoCopy(oldPod), metav1.GetControllerOfNoCopy(pod)
			if pod.DeletionTimestamp != nil && oldPod.DeletionTimestamp == nil {
				if key, ok := o.Resolve(pod.Namespace, newRef); ok {
					exp.DeletionObserved(key, pod.UID)
				}
			}
			if oldRef != nil && (newRef == nil || oldRef.UID != newRef.UID) {
				if key, ok := o.Resolve(oldPod.Namespace, oldRef); ok {
					q.Add(key)
				}
			}
			if key, ok := o.Resolve(pod.Namespace, newRef); ok {
				q.Add(key)
				return
			}
			if newRef == nil {
				enqueueMatching(pod)
			}
		},
		OnDelete: deletePod,
	}
}
