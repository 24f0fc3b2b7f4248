package nodeagent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/nodeagent/podnet"
)

// newRoutes returns the route manager of Config.Routes (nil when unset),
// with this node's name, its InternalIP (Config.NodeIP unless set), its
// --pod-cidr override and a PublishVTEPMAC that writes the annotation on
// the agent's Node through the API.
func (a *Agent) newRoutes() (*podnet.Routes, error) {
	if a.cfg.Routes == nil {
		return nil, nil
	}
	cfg := *a.cfg.Routes
	cfg.NodeName = a.cfg.NodeName
	if cfg.NodeIP == "" {
		cfg.NodeIP = a.cfg.NodeIP
	}
	if cfg.PodCIDR == "" && a.cfg.PodNetwork != nil {
		cfg.PodCIDR = a.cfg.PodNetwork.PodCIDR
	}
	if cfg.Logger == nil {
		cfg.Logger = a.log
	}
	cfg.PublishVTEPMAC = func(ctx context.Context, mac string) error {
		_, err := updateObject(ctx, a.api, store.Nodes, "", a.cfg.NodeName, false, func(obj store.Object) (bool, error) {
			n := obj.(*corev1.Node)
			if n.Annotations[podnet.VTEPMACAnnotation] == mac {
				return false, nil
			}
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			n.Annotations[podnet.VTEPMACAnnotation] = mac
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("annotate node %s with %s=%s: %w", a.cfg.NodeName, podnet.VTEPMACAnnotation, mac, err)
		}
		return nil
	}
	return podnet.NewRoutes(cfg)
}

// runRoutes runs the route manager over an informer of all Nodes until
// ctx ends (goRun runs each part in the agent's wait group).
func (a *Agent) runRoutes(ctx context.Context, goRun func(func())) {
	nodes := store.NewInformer(a.cfg.Store, store.Nodes)
	goRun(func() { nodes.Run(ctx) })
	goRun(func() {
		defer a.routes.Close()
		a.routes.Run(ctx, nodes)
	})
}
