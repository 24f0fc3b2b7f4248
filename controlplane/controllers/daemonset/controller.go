// Package daemonset is orca's DaemonSet controller, ported from
// Kubernetes' pkg/controller/daemon (DaemonSetsController): one pod per
// eligible node — eligibility from the template's nodeName, nodeSelector,
// required node affinity and the node's NoSchedule/NoExecute taints
// against the template's tolerations plus the daemon tolerations — each
// pod placed by the scheduler through a required node affinity term
// matchFields metadata.name In [node]. It follows nodes added, removed,
// relabelled and tainted (pods on nodes no longer eligible are deleted),
// replaces failed daemon pods with a per-node back-off (1 s doubling to
// 15 min), rolls template changes out with RollingUpdate (maxUnavailable,
// or maxSurge: the new pod first, the old one deleted once the new one is
// available) or OnDelete, keeps the template history in ControllerRevisions
// (controller-revision-hash and pod-template-generation pod labels,
// revisionHistoryLimit), and reports status. Expectations keep a slow
// informer or a restart from creating a second pod on a node.
package daemonset

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/events"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Name names the controller in logs and queue metrics.
const Name = "daemonset"

// BurstReplicas is the most pods one sync creates or deletes, as the
// DaemonSetsController's BurstReplicas (250).
const BurstReplicas = 250

// Failed-pod back-off, as the DaemonSetsController's failedPodsBackoff.
const (
	FailedPodsBackoffInitial = time.Second
	FailedPodsBackoffMax     = 15 * time.Minute
)

var controllerKind = appsv1.SchemeGroupVersion.WithKind("DaemonSet")

// Controller is the DaemonSet controller.
type Controller struct {
	s       *store.Store
	reg     *registry.Registry
	dss     *store.Informer
	revs    *store.Informer
	pods    *store.Informer
	nodes   *store.Informer
	queue   workqueue.TypedRateLimitingInterface[string]
	exp     *ctrlutil.Expectations
	rec     *events.Recorder
	backoff *flowcontrol.Backoff
	now     func() time.Time
}

// New returns a controller over the DaemonSets, ControllerRevisions, Pods
// and Nodes informers and registers its event handlers; call Run after the
// informers have synced.
func New(s *store.Store, reg *registry.Registry, dss, revs, pods, nodes *store.Informer) *Controller {
	c := &Controller{s: s, reg: reg, dss: dss, revs: revs, pods: pods, nodes: nodes, queue: ctrlutil.NewQueue(Name),
		exp: ctrlutil.NewExpectations(), rec: events.New(s, "daemonset-controller", ""),
		backoff: flowcontrol.NewBackOff(FailedPodsBackoffInitial, FailedPodsBackoffMax), now: time.Now}
	dss.AddHandler(store.Handler{
		OnAdd:    func(o store.Object) { c.queue.Add(store.KeyOf(o)) },
		OnUpdate: func(_, n store.Object) { c.queue.Add(store.KeyOf(n)) },
		OnDelete: func(o store.Object) {
			c.exp.Delete(store.KeyOf(o))
			c.queue.Add(store.KeyOf(o))
		},
	})
	owners := ctrlutil.Owners{Informer: dss, Kind: controllerKind,
		Selector: func(o store.Object) *metav1.LabelSelector { return o.(*appsv1.DaemonSet).Spec.Selector }}
	pods.AddHandler(owners.PodHandler(c.queue, c.exp))
	nodes.AddHandler(store.Handler{
		OnAdd: func(store.Object) { c.enqueueAll() },
		OnUpdate: func(o, n store.Object) {
			if nodeChanged(o.(*corev1.Node), n.(*corev1.Node)) {
				c.enqueueAll()
			}
		},
		OnDelete: func(store.Object) { c.enqueueAll() },
	})
	revs.AddHandler(store.Handler{
		OnAdd:    c.enqueueRevisionOwner,
		OnUpdate: func(_, n store.Object) { c.enqueueRevisionOwner(n) },
		OnDelete: c.enqueueRevisionOwner,
	})
	return c
}

// Run processes DaemonSets with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	go c.rec.Run(ctx)
	go ctrlutil.Every(ctx, time.Minute, c.backoff.GC)
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

// nodeChanged is the complement of Kubernetes' shouldIgnoreNodeUpdate:
// a node update matters when its labels, taints, unschedulable flag or
// conditions change.
func nodeChanged(o, n *corev1.Node) bool {
	if !apiequality.Semantic.DeepEqual(o.Labels, n.Labels) || !apiequality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) || o.Spec.Unschedulable != n.Spec.Unschedulable {
		return true
	}
	if len(o.Status.Conditions) != len(n.Status.Conditions) {
		return true
	}
	for i := range o.Status.Conditions {
		if o.Status.Conditions[i].Type != n.Status.Conditions[i].Type || o.Status.Conditions[i].Status != n.Status.Conditions[i].Status {
			return true
		}
	}
	return false
}

func (c *Controller) enqueueAll() {
	for _, o := range c.dss.List("", nil) {
		c.queue.Add(store.KeyOf(o))
	}
}

func (c *Controller) enqueueRevisionOwner(o store.Object) {
	if ref := metav1.GetControllerOfNoCopy(o); ref != nil && ref.Kind == controllerKind.Kind {
		c.queue.Add(o.GetNamespace() + "/" + ref.Name)
	}
}
