package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/auth/rbac/bootstrappolicy"
	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
)

// Bootstrap creates, when missing, the namespaces default, kube-system,
// kube-public and kube-node-lease (each with its default ServiceAccount),
// the RuntimeClasses wasm (handler wasm) and runc (handler runc), and
// reconciles the default RBAC policy (bootstrappolicy.Reconcile). It is
// idempotent.
func (s *Server) Bootstrap(ctx context.Context) error {
	s.bootMu.Lock()
	defer s.bootMu.Unlock()
	if _, err := s.metrics(ctx); err != nil { // the bucket agents put their usage in (metrics_api.go)
		s.log.Warn("apiserver: metrics.k8s.io not available", "err", err)
	}
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if _, err := s.createObject(ctx, store.Namespaces, "", obj, false); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("bootstrap namespace %s: %w", ns, err)
		}
		s.ensureDefaultServiceAccount(ctx, ns) // for a namespace made by an older orca
	}
	for _, h := range []string{nodeapi.HandlerWasm, nodeapi.HandlerContainerd} {
		obj := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: h}, Handler: h}
		if _, err := s.createObject(ctx, store.RuntimeClasses, "", obj, false); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("bootstrap runtimeclass %s: %w", h, err)
		}
	}
	// The default RBAC roles and bindings (cluster-admin for
	// system:masters, admin/edit/view, ...), as kube-apiserver's
	// rbac/bootstrap-roles hook.
	if err := bootstrappolicy.Reconcile(ctx, s.st, s.reg); err != nil {
		return fmt.Errorf("bootstrap rbac policy: %w", err)
	}
	return nil
}

func asMaxBytes(err error, target **http.MaxBytesError) bool { return errors.As(err, target) }
