// Package controllers wires orca's controllers (one package each under this
// directory) to one set of shared informers, as kube-controller-manager
// does: Manager.Run starts an informer per resource, waits for them to
// sync, then runs every controller until its context ends. Informer
// handlers run outside the informers' locks (store.Handler), so a handler
// may read any informer.
package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers/clusterroleaggregation"
	"github.com/orca-edge/orca/controlplane/controllers/cronjob"
	"github.com/orca-edge/orca/controlplane/controllers/csr"
	"github.com/orca-edge/orca/controlplane/controllers/daemonset"
	"github.com/orca-edge/orca/controlplane/controllers/deployment"
	"github.com/orca-edge/orca/controlplane/controllers/disruption"
	"github.com/orca-edge/orca/controlplane/controllers/endpoints"
	"github.com/orca-edge/orca/controlplane/controllers/endpointslice"
	"github.com/orca-edge/orca/controlplane/controllers/eventttl"
	"github.com/orca-edge/orca/controlplane/controllers/gc"
	"github.com/orca-edge/orca/controlplane/controllers/job"
	"github.com/orca-edge/orca/controlplane/controllers/namespace"
	"github.com/orca-edge/orca/controlplane/controllers/nodeipam"
	"github.com/orca-edge/orca/controlplane/controllers/nodelifecycle"
	"github.com/orca-edge/orca/controlplane/controllers/nodepods"
	"github.com/orca-edge/orca/controlplane/controllers/persistentvolume"
	"github.com/orca-edge/orca/controlplane/controllers/podgc"
	"github.com/orca-edge/orca/controlplane/controllers/replicaset"
	"github.com/orca-edge/orca/controlplane/controllers/resourcequota"
	"github.com/orca-edge/orca/controlplane/controllers/rootcacertpublisher"
	"github.com/orca-edge/orca/controlplane/controllers/serviceaccount"
	"github.com/orca-edge/orca/controlplane/controllers/servicelb"
	"github.com/orca-edge/orca/controlplane/controllers/statefulset"
	"github.com/orca-edge/orca/controlplane/controllers/tokencleaner"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/apps"
	"github.com/orca-edge/orca/controlplane/registry/batch"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/certificates"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/registry/policy"
	"github.com/orca-edge/orca/controlplane/registry/rbac"
	"github.com/orca-edge/orca/controlplane/registry/storage"
	"github.com/orca-edge/orca/controlplane/store"
)

// Config configures the controllers.
type Config struct {
	// Store is the object store. Required.
	Store *store.Store
	// Registry holds the kinds: the controllers create, update and delete
	// through it (the same rules as the API), and the namespace and GC
	// controllers cover every kind it holds, kinds added at run time
	// included. Default: builtin.New(). Pass the apiserver's.
	Registry *registry.Registry
	// NodeMonitorGracePeriod is how long a node may go without renewing
	// its Lease before its Ready condition becomes Unknown. Default 40 s.
	// It is also how long a Node object must be missing before the pods
	// bound to it are removed (podgc).
	NodeMonitorGracePeriod time.Duration
	// Workers is the number of workers per controller. Default 2
	// (nodepods uses at least nodepods.MinWorkers).
	Workers int
	// EventTTL is how long an Event lives after it was last seen.
	// Default 1 h (kube-apiserver's --event-ttl).
	EventTTL time.Duration
	// ClusterSigningCA signs approved CertificateSigningRequests of the
	// kubernetes.io signers (csr.Signer). Nil: none are signed (node
	// client CSRs are still approved).
	ClusterSigningCA *csr.CA
	// RootCA is the cluster CA bundle (PEM) published in every namespace
	// as ConfigMap kube-root-ca.crt (rootcacertpublisher), which every
	// pod's kube-api-access volume projects. Nil: not published.
	RootCA []byte
	// ClusterSigningDuration caps the life of signed certificates
	// (kube-controller-manager's --cluster-signing-duration). Default 1 year.
	ClusterSigningDuration time.Duration
	// Informers, when set, are the process's shared informers (started by
	// their owner): the controllers use them instead of informers of
	// their own, so that the scheduler, the Node authorizer and the
	// controllers of one orca-server hold one cache per resource. Nil: the
	// Manager builds its own and runs them in Run.
	Informers *store.SharedInformers
	// ClusterCIDR, when set, runs the node IPAM controller (nodeipam):
	// every Node without spec.podCIDR gets a subnet of NodeCIDRMaskSize
	// bits (default 24) from it, as kube-controller-manager's
	// --allocate-node-cidrs with --cluster-cidr. Empty: no allocation.
	ClusterCIDR      string
	NodeCIDRMaskSize int
	// DisableServiceLB turns off the servicelb controller, which sets the
	// ingress of LoadBalancer Services to the Ready nodes' addresses (k3s's
	// --disable servicelb).
	DisableServiceLB bool
	// ResourceQuotaSyncPeriod is how often every ResourceQuota's usage is
	// recalculated whatever changed (kube-controller-manager's
	// --resource-quota-sync-period). Default 5 minutes.
	ResourceQuotaSyncPeriod time.Duration
	// JobBackoffBase is the Job controller's delay before replacing a
	// failed pod, doubling per failure up to 6 min. Default 10 s
	// (job.DefaultBackoffBase); tests set it small.
	JobBackoffBase time.Duration
	// DefaultLocalStoragePath is where the local-path provisioner puts
	// volumes on every node (k3s's --default-local-storage-path); empty:
	// each node's own (persistentvolume.Config).
	DefaultLocalStoragePath string
	// DisableLocalStorage keeps the default local-path StorageClass from
	// being created (k3s's --disable local-storage).
	DisableLocalStorage bool
}

// Manager runs the controllers over shared informers.
type Manager struct {
	cfg         Config
	factory     *store.SharedInformers // cfg.Informers, or the Manager's own (Run starts it)
	informers   []*store.Informer
	controllers []namedRunner
}

type namedRunner struct {
	name string
	run  func(ctx context.Context, workers int) error
}

// New builds the informers and controllers and registers the controllers'
// event handlers. It fails when cfg.Store is nil.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil {
		return nil, errors.New("controllers: Config.Store is required")
	}
	if cfg.NodeMonitorGracePeriod <= 0 {
		cfg.NodeMonitorGracePeriod = nodelifecycle.DefaultGracePeriod
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.Registry == nil {
		cfg.Registry = builtin.New()
	}
	reg := cfg.Registry
	s := cfg.Store
	factory := cfg.Informers
	if factory == nil {
		factory = store.NewSharedInformers(s)
	}
	inf := factory.For
	var (
		pods        = inf(store.Pods)
		rss         = inf(store.ReplicaSets)
		deployments = inf(store.Deployments)
		services    = inf(store.Services)
		eps         = inf(store.Endpoints)
		nodes       = inf(store.Nodes)
		leases      = inf(store.Leases)
		namespaces  = inf(store.Namespaces)
		slices      = inf(store.EndpointSlices)
		pdbs        = inf(policy.PodDisruptionBudgets)
		sas         = inf(core.ServiceAccounts)
		crs         = inf(rbac.ClusterRoles)
		csrs        = inf(certificates.CertificateSigningRequests)
		pvcs        = inf(core.PersistentVolumeClaims)
		pvs         = inf(core.PersistentVolumes)
		scs         = inf(storage.StorageClasses)
		dss         = inf(apps.DaemonSets)
		revs        = inf(apps.ControllerRevisions)
	)
	m := &Manager{cfg: cfg, factory: factory, informers: []*store.Informer{pods, rss, deployments, services, eps, nodes, leases, namespaces, slices, pdbs, sas, crs, csrs, pvcs, pvs, scs, dss, revs}}
	wrap := func(run func(context.Context, int)) func(context.Context, int) error {
		return func(ctx context.Context, w int) error { run(ctx, w); return nil }
	}
	jobs, cronJobs := inf(batch.Jobs), inf(batch.CronJobs)
	m.informers = append(m.informers, jobs, cronJobs)
	m.controllers = []namedRunner{
		{job.Name, wrap(job.New(s, reg, jobs, pods, job.Options{BackoffBase: cfg.JobBackoffBase}).Run)},
		{job.TTLName, wrap(job.NewTTL(s, reg, jobs).Run)},
		{cronjob.Name, wrap(cronjob.New(s, reg, cronJobs, jobs, cronjob.Options{}).Run)},
		{nodepods.Name, nodepods.New(s, pods).Run},
		{replicaset.Name, wrap(replicaset.New(s, reg, rss, pods).Run)},
		{deployment.Name, wrap(deployment.New(s, reg, deployments, rss, pods).Run)},
		{daemonset.Name, wrap(daemonset.New(s, reg, dss, revs, pods, nodes).Run)},
		{endpoints.Name, wrap(endpoints.New(s, reg, services, pods, eps).Run)},
		{endpointslice.Name, wrap(endpointslice.New(s, reg, services, pods, eps, slices).Run)},
		{nodelifecycle.Name, wrap(nodelifecycle.New(s, reg, nodes, leases, pods, cfg.NodeMonitorGracePeriod).Run)},
		{gc.Name, wrap(gc.New(s, reg, pods, rss, deployments, services, eps, leases, nodes, namespaces, slices).Run)},
		{namespace.Name, wrap(namespace.New(s, reg, namespaces).Run)},
		{podgc.Name, wrap(podgc.New(s, pods, nodes, cfg.NodeMonitorGracePeriod).Run)},
		{eventttl.Name, wrap(eventttl.New(s, cfg.EventTTL).Run)},
		{disruption.Name, wrap(disruption.New(s, reg, policy.PodDisruptionBudgets, pdbs, pods, rss, deployments).Run)},
		{serviceaccount.Name, wrap(serviceaccount.New(s, reg, namespaces, sas).Run)},
		{clusterroleaggregation.Name, wrap(clusterroleaggregation.New(s, reg, crs).Run)},
		{csr.ApproverName, wrap(csr.NewApprover(s, reg, csrs).Run)},
		{tokencleaner.Name, wrap(tokencleaner.New(s, reg, 0).Run)},
		{persistentvolume.Name, wrap(persistentvolume.New(s, reg, pvcs, pvs, scs, pods, nodes,
			persistentvolume.Config{DefaultLocalStoragePath: cfg.DefaultLocalStoragePath, DisableDefaultClass: cfg.DisableLocalStorage}).Run)},
	}
	quotas, cms, secrets := inf(core.ResourceQuotas), inf(store.ConfigMaps), inf(store.Secrets)
	m.informers = append(m.informers, quotas, cms, secrets)
	m.controllers = append(m.controllers, namedRunner{resourcequota.Name,
		wrap(resourcequota.New(s, reg, quotas, pods, []*store.Informer{services, pvcs, cms, secrets}, cfg.ResourceQuotaSyncPeriod).Run)})
	stss, revs := inf(apps.StatefulSets), inf(apps.ControllerRevisions)
	m.informers = append(m.informers, stss, revs)
	m.controllers = append(m.controllers, namedRunner{statefulset.Name, wrap(statefulset.New(s, reg, stss, pods, pvcs, revs).Run)})
	if !cfg.DisableServiceLB {
		m.controllers = append(m.controllers, namedRunner{servicelb.Name, wrap(servicelb.New(s, reg, services, nodes).Run)})
	}
	if cfg.ClusterCIDR != "" {
		if cfg.NodeCIDRMaskSize == 0 {
			cfg.NodeCIDRMaskSize = nodeipam.DefaultNodeCIDRMaskSize
		}
		rng, err := nodeipam.ParseRange(cfg.ClusterCIDR, cfg.NodeCIDRMaskSize)
		if err != nil {
			return nil, fmt.Errorf("controllers: %w", err)
		}
		m.controllers = append(m.controllers, namedRunner{nodeipam.Name, wrap(nodeipam.New(s, reg, nodes, rng).Run)})
	}
	if cfg.RootCA != nil {
		m.controllers = append(m.controllers, namedRunner{rootcacertpublisher.Name, wrap(rootcacertpublisher.New(s, reg, namespaces, cms, cfg.RootCA).Run)})
	}
	if cfg.ClusterSigningCA != nil {
		m.controllers = append(m.controllers, namedRunner{csr.SignerName, wrap(csr.NewSigner(s, reg, csrs, *cfg.ClusterSigningCA, cfg.ClusterSigningDuration).Run)})
	}
	return m, nil
}

// Run starts the informers (unless Config.Informers were given: their
// owner runs them), waits until each has loaded its first full list, then
// runs every controller until ctx ends. It returns nil when ctx ends, or
// the first controller's failure to start, once every controller (and
// informer it started) has stopped.
func (m *Manager) Run(ctx context.Context) error {
	// Deferred calls run last first: cancel, then wait for the informers
	// and the controllers.
	var wg sync.WaitGroup
	defer wg.Wait()
	own := m.cfg.Informers == nil
	if own {
		defer m.factory.Wait()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if own {
		m.factory.Start(ctx)
	}
	for _, inf := range m.informers {
		if !inf.WaitForSync(ctx) {
			return nil
		}
	}
	errc := make(chan error, len(m.controllers))
	for _, c := range m.controllers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.run(ctx, m.cfg.Workers); err != nil {
				errc <- fmt.Errorf("controller %s: %w", c.name, err)
			}
		}()
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}
