package apiserver

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/orca-edge/orca/controlplane/auth/node"
	"github.com/orca-edge/orca/controlplane/store"
)

// admitNode runs NodeRestriction admission (controlplane/auth/node.Admit)
// on a write of r by the request's user: a no-op for users that are not
// nodes. obj is the new object (nil on delete), old the stored one (nil
// on create).
func (s *Server) admitNode(ctx context.Context, op string, r store.Resource, sub, namespace, name string, obj, old any) error {
	u, ok := request.UserFrom(ctx)
	if !ok {
		return nil
	}
	if _, isNode := node.Identity(u); !isNode {
		return nil
	}
	return node.Admit(node.Attributes{User: u, Operation: op, Group: r.Group, Resource: r.Plural, Subresource: sub,
		Namespace: namespace, Name: name, Object: obj, OldObject: old, PodLookup: s.lookupPod(ctx)})
}

// admitNodeDelete is admitNode for a delete: for a node user it reads the
// stored object first (NotFound is returned as is).
func (s *Server) admitNodeDelete(ctx context.Context, r store.Resource, sub, namespace, name string) error {
	u, ok := request.UserFrom(ctx)
	if !ok {
		return nil
	}
	if _, isNode := node.Identity(u); !isNode {
		return nil
	}
	old, err := s.st.Get(ctx, r, namespace, name)
	if err != nil {
		return err
	}
	return s.admitNode(ctx, node.Delete, r, sub, namespace, name, nil, old)
}

// lookupPod returns the pod lookup of NodeRestriction's token checks: a
// read of the store.
func (s *Server) lookupPod(ctx context.Context) func(namespace, name string) (*corev1.Pod, bool) {
	return func(namespace, name string) (*corev1.Pod, bool) {
		obj, err := s.st.Get(ctx, store.Pods, namespace, name)
		if err != nil {
			return nil, false
		}
		return obj.(*corev1.Pod), true
	}
}
