package storebench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/orca-edge/orca/controlplane/store"
)

// Durability is how an orca target makes each acknowledged write durable.
type Durability string

const (
	// GroupCommit: the store fsyncs before acknowledging, one fsync for
	// the writes waiting together (orca-server's default).
	GroupCommit Durability = "group-commit"
	// SyncAlways: JetStream's sync_always, the server fsyncs every message
	// (orca before group commit).
	SyncAlways Durability = "sync-always"
)

// StartOrca starts an embedded NATS server on a random loopback port with
// its data under dir, durable as d, and returns a target on orca's typed
// store over it. Close stops both.
func StartOrca(dir string, d Durability) (Target, error) {
	ecfg := store.EmbeddedConfig{Port: -1, DataDir: dir, SyncAlways: true}
	switch d {
	case GroupCommit:
		ecfg.GroupCommit = true
	case SyncAlways:
	default:
		return nil, fmt.Errorf("storebench: unknown durability %q", d)
	}
	ns, err := store.StartEmbedded(ecfg)
	if err != nil {
		return nil, err
	}
	var cfg store.Config
	if d == GroupCommit {
		if cfg.GroupCommit, err = store.NewGroupCommit(ns); err != nil {
			ns.Shutdown()
			return nil, err
		}
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		ns.Shutdown()
		return nil, err
	}
	st, err := store.New(nc, cfg)
	if err != nil {
		nc.Close()
		ns.Shutdown()
		return nil, err
	}
	return &orcaTarget{name: "orca/" + string(d), st: st, nc: nc, ns: ns, gc: cfg.GroupCommit}, nil
}

func (o *orcaTarget) serverCPU() time.Duration { return 0 } // embedded: counted as this process's

func (o *orcaTarget) fsyncs() (uint64, bool) {
	if o.gc == nil {
		return 0, false
	}
	return o.gc.Stats().Rounds, true
}

// NewOrca returns a target on an existing store; Close does not close it.
func NewOrca(name string, st *store.Store) Target { return &orcaTarget{name: name, st: st} }

type orcaTarget struct {
	name string
	st   *store.Store
	nc   *nats.Conn     // owned, or nil
	ns   *server.Server // owned, or nil
	gc   *store.GroupCommit
}

func (o *orcaTarget) Name() string { return o.name }

func (o *orcaTarget) Create(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	out, err := o.st.Create(ctx, store.ConfigMaps, cm)
	if err != nil {
		return nil, err
	}
	return out.(*corev1.ConfigMap), nil
}

func (o *orcaTarget) Get(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	out, err := o.st.Get(ctx, store.ConfigMaps, namespace, name)
	if err != nil {
		return nil, err
	}
	return out.(*corev1.ConfigMap), nil
}

func (o *orcaTarget) Update(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	out, err := o.st.Update(ctx, store.ConfigMaps, cm)
	if err != nil {
		return nil, err
	}
	return out.(*corev1.ConfigMap), nil
}

func (o *orcaTarget) List(ctx context.Context, namespace string) (int, error) {
	objs, _, err := o.st.List(ctx, store.ConfigMaps, namespace)
	return len(objs), err
}

func (o *orcaTarget) Watch(ctx context.Context, namespace string, fn func(string)) error {
	// From the current revision: no initial events.
	_, rev, err := o.st.List(ctx, store.ConfigMaps, namespace)
	if err != nil {
		return err
	}
	w, err := o.st.Watch(ctx, store.ConfigMaps, namespace, rev)
	if err != nil {
		return err
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok {
				fn(cm.Name)
			}
		}
	}()
	return nil
}

func (o *orcaTarget) Close() error {
	if o.nc == nil {
		return nil
	}
	o.st.Close()
	o.nc.Close()
	if o.gc != nil {
		o.gc.Close()
	}
	o.ns.Shutdown()
	o.ns.WaitForShutdown()
	return nil
}
