// Package persistentvolume is orca's persistent volume controller, as
// kube-controller-manager's persistentvolume-binder, pvc-protection and
// pv-protection controllers (pkg/controller/volume/persistentvolume,
// pvcprotection, pvprotection) together with a local-path provisioner
// like k3s's (rancher/local-path-provisioner), in one package:
//
//   - binding (binder.go): a claim binds to the smallest Available
//     PersistentVolume of its class whose access modes, size, volumeMode
//     and labels (the claim's selector) match (static provisioning), or to
//     the PV made for it; the PV's claimRef and the claim's volumeName are
//     written in that order, then the phases (PV Available / Bound /
//     Released / Failed, claim Pending / Bound / Lost). A claim of a
//     WaitForFirstConsumer class waits until the scheduler (VolumeBinding)
//     sets volume.kubernetes.io/selected-node, and then binds only to a PV
//     whose node affinity admits that node;
//   - dynamic provisioning (provision.go): a claim of a class whose
//     provisioner is LocalPathProvisioner (or rancher's name) gets a PV
//     pvc-<claim uid> with a hostPath <root>/<pv>_<namespace>_<claim>
//     pinned to the selected node by node affinity; the node's agent
//     makes the directory when a pod using the claim lands there;
//   - reclaiming: a Released PV with reclaim policy Retain stays Released;
//     with Delete, a local-path PV's directory is removed by its node's
//     agent (nodeapi.DeleteLocalVolume) and then the PV is deleted; other
//     PVs cannot be deleted (phase Failed, VolumeFailedDelete), as
//     Kubernetes without a deleter plugin;
//   - protection (protection.go): the kubernetes.io/pvc-protection
//     finalizer of a claim being deleted goes once no pod that is not
//     Succeeded or Failed uses it, the kubernetes.io/pv-protection one of a
//     PV once it is not Bound;
//   - the default StorageClass local-path (defaultclass.go), created at
//     start, and given to claims without storageClassName (retroactive
//     default class assignment; the DefaultStorageClass admission in
//     controlplane/registry/storage does it at creation).
//
// Every write goes through the registry; the names of provisioned PVs
// come from the claim's uid, so a restart or a slow informer never makes
// two volumes for one claim.
package persistentvolume

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/events"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Name names the controller in logs and queue metrics.
const Name = "persistentvolume"

// ResyncPeriod is how often every claim and volume is synced again even
// without an event, as the PV controller's --pvclaimbinder-sync-period
// (15 s).
const ResyncPeriod = 15 * time.Second

// Config configures the controller.
type Config struct {
	// DefaultLocalStoragePath is the directory local-path volumes are made
	// under on every node (k3s's --default-local-storage-path). Empty: the
	// node's own, from its annotation AnnNodeLocalStoragePath (the agent's
	// <data-dir>/storage unless its --default-local-storage-path says
	// otherwise).
	DefaultLocalStoragePath string
	// DisableDefaultClass keeps the controller from creating the
	// local-path StorageClass at start (k3s's --disable local-storage).
	DisableDefaultClass bool
	// DeleteVolume removes a local-path volume's directory on its node
	// before its PV is deleted. Default: nodeapi.DeleteLocalVolume over
	// the store's NATS connection.
	DeleteVolume func(ctx context.Context, node, volume, path string) error
}

// Controller is the persistent volume controller.
type Controller struct {
	s                        *store.Store
	reg                      *registry.Registry
	cfg                      Config
	claims, volumes, classes *store.Informer
	pods, nodes              *store.Informer
	claimQueue, volumeQueue  workqueue.TypedRateLimitingInterface[string]
	rec                      *events.Recorder
	mu                       sync.Mutex
	waitingEvents            map[string]string // claim key -> last event reason, to say each once
}

// New returns the controller over the informers of PersistentVolumeClaims,
// PersistentVolumes, StorageClasses, Pods and Nodes, and registers its
// handlers (they read no informer but pods'). reg must serve those kinds.
func New(s *store.Store, reg *registry.Registry, claims, volumes, classes, pods, nodes *store.Informer, cfg Config) *Controller {
	c := &Controller{s: s, reg: reg, cfg: cfg, claims: claims, volumes: volumes, classes: classes, pods: pods, nodes: nodes,
		claimQueue: ctrlutil.NewQueue(Name + "-claims"), volumeQueue: ctrlutil.NewQueue(Name + "-volumes"),
		rec: events.New(s, "persistentvolume-controller", ""), waitingEvents: map[string]string{}}
	if c.cfg.DeleteVolume == nil {
		c.cfg.DeleteVolume = c.deleteOnNode
	}
	claimChanged := func(o store.Object) {
		pvc := o.(*corev1.PersistentVolumeClaim)
		c.claimQueue.Add(store.KeyOf(pvc))
		if pvc.Spec.VolumeName != "" {
			c.volumeQueue.Add(pvc.Spec.VolumeName)
		}
	}
	claims.AddHandler(store.Handler{OnAdd: claimChanged, OnUpdate: func(_, n store.Object) { claimChanged(n) }, OnDelete: func(o store.Object) {
		claimChanged(o)
		c.mu.Lock()
		delete(c.waitingEvents, store.KeyOf(o))
		c.mu.Unlock()
	}})
	volumeChanged := func(o store.Object) {
		pv := o.(*corev1.PersistentVolume)
		c.volumeQueue.Add(pv.Name)
		if ref := pv.Spec.ClaimRef; ref != nil {
			c.claimQueue.Add(ref.Namespace + "/" + ref.Name)
		} else {
			// A free volume: an unbound claim may match it now.
			c.enqueueUnboundClaims()
		}
	}
	volumes.AddHandler(store.Handler{OnAdd: volumeChanged, OnUpdate: func(_, n store.Object) { volumeChanged(n) }, OnDelete: func(o store.Object) {
		volumeChanged(o)
		// An unbound claim of the class may now match another volume.
		c.enqueueUnboundClaims()
	}})
	classes.AddHandler(store.Handler{OnAdd: func(store.Object) { c.enqueueUnboundClaims() }, OnUpdate: func(_, n store.Object) {
		if _, ok := n.(*storagev1.StorageClass); ok {
			c.enqueueUnboundClaims()
		}
	}})
	podChanged := func(o store.Object) {
		for _, name := range podClaimNames(o.(*corev1.Pod)) {
			c.claimQueue.Add(o.GetNamespace() + "/" + name)
		}
	}
	pods.AddHandler(store.Handler{OnUpdate: func(_, n store.Object) { podChanged(n) }, OnDelete: podChanged})
	return c
}

// Run creates the default StorageClass (unless disabled) and syncs claims
// and volumes with workers goroutines each until ctx ends, every claim
// and volume again each ResyncPeriod.
func (c *Controller) Run(ctx context.Context, workers int) {
	go c.rec.Run(ctx)
	if !c.cfg.DisableDefaultClass {
		c.ensureDefaultClass(ctx)
	}
	go ctrlutil.Every(ctx, ResyncPeriod, func() {
		for _, o := range c.claims.List("", nil) {
			c.claimQueue.Add(store.KeyOf(o))
		}
		for _, o := range c.volumes.List("", nil) {
			c.volumeQueue.Add(o.GetName())
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctrlutil.RunWorkers(ctx, Name+"-volumes", c.volumeQueue, workers, c.syncVolumeKey)
	}()
	ctrlutil.RunWorkers(ctx, Name+"-claims", c.claimQueue, workers, c.syncClaimKey)
	<-done
}

// enqueueUnboundClaims queues every claim without a volume.
func (c *Controller) enqueueUnboundClaims() {
	for _, o := range c.claims.List("", nil) {
		if o.(*corev1.PersistentVolumeClaim).Spec.VolumeName == "" {
			c.claimQueue.Add(store.KeyOf(o))
		}
	}
}

// podClaimNames returns the claims pod's volumes name.
func podClaimNames(pod *corev1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out
}

// eventOnce records an event about a waiting claim once per reason (a
// claim waiting for its first consumer is synced every ResyncPeriod).
func (c *Controller) eventOnce(pvc *corev1.PersistentVolumeClaim, typ, reason, msg string) {
	key := store.KeyOf(pvc)
	c.mu.Lock()
	seen := c.waitingEvents[key] == reason+msg
	c.waitingEvents[key] = reason + msg
	c.mu.Unlock()
	if !seen {
		c.rec.Event(pvc, "", typ, reason, msg)
	}
}
