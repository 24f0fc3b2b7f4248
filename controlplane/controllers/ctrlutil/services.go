package ctrlutil

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/store"
)

// ServicePodHandler returns pod event handlers that enqueue the key of
// every Service in services, in the pod's namespace, whose selector
// matches the pod's labels or, when an update changed them, its former
// labels, as the Endpoints and EndpointSlice controllers' addPod,
// updatePod and deletePod. Services without a selector are skipped; an
// update that does not change the resourceVersion is ignored.
func ServicePodHandler(services *store.Informer, q workqueue.TypedRateLimitingInterface[string]) store.Handler {
	enqueue := func(pod *corev1.Pod, oldLabels labels.Set) {
		for _, o := range services.List(pod.Namespace, nil) {
			svc := o.(*corev1.Service)
			if svc.Spec.Selector == nil {
				continue
			}
			sel := labels.SelectorFromValidatedSet(svc.Spec.Selector)
			if sel.Matches(labels.Set(pod.Labels)) || (oldLabels != nil && sel.Matches(oldLabels)) {
				q.Add(store.KeyOf(svc))
			}
		}
	}
	return store.Handler{
		OnAdd: func(o store.Object) { enqueue(o.(*corev1.Pod), nil) },
		OnUpdate: func(oldObj, newObj store.Object) {
			oldPod, pod := oldObj.(*corev1.Pod), newObj.(*corev1.Pod)
			if oldPod.ResourceVersion == pod.ResourceVersion {
				return
			}
			var oldLabels labels.Set
			if !labels.Equals(oldPod.Labels, pod.Labels) {
				oldLabels = oldPod.Labels
			}
			enqueue(pod, oldLabels)
		},
		OnDelete: func(o store.Object) { enqueue(o.(*corev1.Pod), nil) },
	}
}
