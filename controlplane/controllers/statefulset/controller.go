// Package statefulset is orca's StatefulSet controller, ported from
// kube-controller-manager's pkg/controller/statefulset
// (StatefulSetController, defaultStatefulSetControl.updateStatefulSet,
// StatefulPodControl, the history helpers of pkg/controller/history):
//
//   - pods are named "<set>-<ordinal>" for the ordinals
//     [spec.ordinals.start, start+replicas), labelled
//     statefulset.kubernetes.io/pod-name, apps.kubernetes.io/pod-index and
//     controller-revision-hash, with hostname = pod name and subdomain =
//     spec.serviceName;
//   - each volumeClaimTemplate gives a claim "<template>-<set>-<ordinal>"
//     made before the pod and put in its volumes; claims outlive their
//     pods, and are removed with the set (whenDeleted: Delete: an
//     ownerReference to the set) or with a pod condemned by a scale-down
//     (whenScaled: Delete: an ownerReference to the pod) by the garbage
//     collector;
//   - OrderedReady creates one pod at a time in ordinal order, each
//     Running and Ready (and available for minReadySeconds) before the
//     next, and removes pods from the highest ordinal one at a time;
//     Parallel creates and removes all at once;
//   - RollingUpdate replaces pods whose controller-revision-hash is not the
//     update revision from the highest ordinal down to
//     rollingUpdate.partition, one at a time, each healthy before the
//     next; OnDelete only uses the update revision for pods that were
//     deleted;
//   - the template history is kept in ControllerRevisions
//     "<set>-<hash>" (data: the template as a strategic-merge patch, as
//     Kubernetes' getPatch), with collisionCount on hash collisions and
//     revisionHistoryLimit for the unused ones.
//
// At most one pod per ordinal: a pod's name is its identity, and the store
// holds one object per name, so a replacement is created only once the old
// pod is gone from the store; a pod Terminating (on a lost node too) keeps
// its replacement from being made until its agent or a force delete
// removes it. That is also why the controller needs no creation
// expectations, as Kubernetes': a lagging cache or a restart at worst makes
// a create that fails with AlreadyExists.
//
// Left out: maxUnavailable of RollingUpdate (alpha in Kubernetes), the
// StatefulSet conditions, and retention-policy changes on existing claims
// other than adding or removing the set's ownerReference.
package statefulset

import (
	"context"
	"regexp"
	"strconv"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/events"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
)

// Name names the controller in logs and queue metrics.
const Name = "statefulset"

var controllerKind = appsv1.SchemeGroupVersion.WithKind("StatefulSet")

// Controller is the StatefulSet controller.
type Controller struct {
	s         *store.Store
	reg       *registry.Registry
	sets      *store.Informer
	pods      *store.Informer
	claims    *store.Informer
	revisions *store.Informer
	owners    ctrlutil.Owners // the sets, as owners of pods
	queue     workqueue.TypedRateLimitingInterface[string]
	rec       *events.Recorder
}

// New returns a controller over the StatefulSets, Pods,
// PersistentVolumeClaims and ControllerRevisions informers and registers
// its handlers; call Run after the informers have synced.
func New(s *store.Store, reg *registry.Registry, sets, pods, claims, revisions *store.Informer) *Controller {
	c := &Controller{s: s, reg: reg, sets: sets, pods: pods, claims: claims, revisions: revisions,
		queue: ctrlutil.NewQueue(Name), rec: events.New(s, "statefulset-controller", ""),
		owners: ctrlutil.Owners{Informer: sets, Kind: controllerKind,
			Selector: func(o store.Object) *metav1.LabelSelector { return o.(*appsv1.StatefulSet).Spec.Selector }}}
	sets.AddHandler(ctrlutil.EnqueueHandler(c.queue))
	pods.AddHandler(store.Handler{
		OnAdd: func(o store.Object) { c.enqueuePod(o.(*corev1.Pod), nil) },
		OnUpdate: func(old, n store.Object) {
			if old.GetResourceVersion() != n.GetResourceVersion() {
				c.enqueuePod(n.(*corev1.Pod), old.(*corev1.Pod))
			}
		},
		OnDelete: func(o store.Object) { c.enqueuePod(o.(*corev1.Pod), nil) },
	})
	return c
}

// Run processes StatefulSets with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	go c.rec.Run(ctx)
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

// enqueuePod enqueues the set controlling pod (and the one that
// controlled old, if another), or, for an orphan, every set whose
// selector matches it.
func (c *Controller) enqueuePod(pod, old *corev1.Pod) {
	if old != nil {
		if r := metav1.GetControllerOfNoCopy(old); r != nil {
			if nr := metav1.GetControllerOfNoCopy(pod); nr == nil || nr.UID != r.UID {
				c.enqueueRef(old.Namespace, r)
			}
		}
	}
	if r := metav1.GetControllerOfNoCopy(pod); r != nil {
		c.enqueueRef(pod.Namespace, r)
		return
	}
	if len(pod.Labels) == 0 || pod.DeletionTimestamp != nil {
		return
	}
	for _, key := range c.owners.Matching(pod.Namespace, pod.Labels) {
		c.queue.Add(key)
	}
}

func (c *Controller) enqueueRef(ns string, r *metav1.OwnerReference) {
	if key, ok := c.owners.Resolve(ns, r); ok {
		c.queue.Add(key)
	}
}

var podNameRE = regexp.MustCompile("(.*)-([0-9]+)$")

// parentAndOrdinal returns the set name and ordinal a pod's name encodes
// ("web-3": "web", 3), or ("", -1), as getParentNameAndOrdinal.
func parentAndOrdinal(pod *corev1.Pod) (string, int) {
	m := podNameRE.FindStringSubmatch(pod.Name)
	if len(m) < 3 {
		return "", -1
	}
	n, err := strconv.ParseInt(m[2], 10, 32)
	if err != nil {
		return "", -1
	}
	return m[1], int(n)
}

// isMemberOf reports whether pod's name makes it one of set's pods.
func isMemberOf(set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	p, _ := parentAndOrdinal(pod)
	return p == set.Name
}

// PodName is the name of set's pod of ordinal ord.
func PodName(set *appsv1.StatefulSet, ord int) string { return set.Name + "-" + strconv.Itoa(ord) }

// ClaimName is the name of the claim of template tpl for the pod of
// ordinal ord: "<template>-<set>-<ordinal>".
func ClaimName(set *appsv1.StatefulSet, tpl *corev1.PersistentVolumeClaim, ord int) string {
	return tpl.Name + "-" + PodName(set, ord)
}
