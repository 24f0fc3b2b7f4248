package apiserver

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/orca-edge/orca/controlplane/registry"
)

// rbacAdmissionName names the escalation check among the registry's
// validating admission plugins.
const rbacAdmissionName = "RBACEscalation"

// installRBACAdmission installs, when Config.RBAC is set, Kubernetes' RBAC
// escalation prevention as a validating admission plugin of the registry
// (rbac.Resolver.AdmitWrite, with Config.Authorizer for the escalate and
// bind verbs): a create or update of a Role, ClusterRole, RoleBinding or
// ClusterRoleBinding that would grant the request's user permissions they
// do not hold is a 403. Writes without a user in their context are the
// server's own (Bootstrap's default policy, the aggregation controller)
// and pass: every HTTP and relay request has one (the chain answers 401
// otherwise).
func (s *Server) installRBACAdmission() {
	if s.cfg.RBAC == nil {
		return
	}
	s.reg.SetValidatingAdmission(rbacAdmissionName, func(ctx context.Context, a registry.AdmissionAttributes) error {
		if a.Resource.Group != rbacv1.GroupName {
			return nil
		}
		u, ok := request.UserFrom(ctx)
		if !ok {
			return nil
		}
		return s.cfg.RBAC.Resolver().AdmitWrite(ctx, s.cfg.Authorizer, u, a.Object, a.OldObject)
	})
}
