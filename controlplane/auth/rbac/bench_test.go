package rbac

import (
	"context"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
	regrbac "github.com/orca-edge/orca/controlplane/registry/rbac"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// BenchmarkAuthorize measures one decision with n ClusterRoleBindings
// and n RoleBindings in the request's namespace, none of them the user's
// but the last RoleBinding (the worst case: every binding is visited, as
// in Kubernetes' resolver).
func BenchmarkAuthorize(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("bindings=%d", n), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := storetest.NewStore(b)
			reg := builtin.New()
			mk := func(r store.Resource, o store.Object) {
				if _, err := reg.Create(ctx, s, r, o); err != nil {
					b.Fatal(err)
				}
			}
			mk(regrbac.ClusterRoles, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "reader"},
				Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"pods", "services", "configmaps"}}}})
			ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "reader"}
			for i := range n {
				sub := []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: fmt.Sprintf("user-%d", i)}}
				mk(regrbac.ClusterRoleBindings, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("crb-%d", i)}, RoleRef: ref, Subjects: sub})
				if i == n-1 {
					sub = []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "jane"}}
				}
				mk(regrbac.RoleBindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: fmt.Sprintf("rb-%d", i)}, RoleRef: ref, Subjects: sub})
			}
			a := NewFromStore(s)
			go a.Run(ctx)
			a.WaitForSync(ctx)
			attrs := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "jane", Groups: []string{user.AllAuthenticated}},
				Verb: "list", Resource: "configmaps", Namespace: "team", ResourceRequest: true}
			storetest.Eventually(b, 30*time.Second, func() error {
				if d, _, _ := a.Authorize(ctx, attrs); d != authorizer.DecisionAllow {
					return fmt.Errorf("not allowed yet")
				}
				return nil
			})
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if d, _, _ := a.Authorize(ctx, attrs); d != authorizer.DecisionAllow {
					b.Fatal("denied")
				}
			}
		})
	}
}
