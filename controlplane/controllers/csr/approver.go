package csr

import (
	"context"
	"fmt"
	"slices"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/certificates"
	"github.com/orca-edge/orca/controlplane/store"
)

// ApproverName names the approver in logs and queue metrics.
const ApproverName = "csrapproving"

// Approver approves node client certificate requests, as
// kube-controller-manager's csrapproving controller, with fixed rules in
// place of its SubjectAccessReviews (orca's default RBAC binds the same
// permissions to the same groups):
//   - "nodeclient": a kube-apiserver-client-kubelet CSR (see
//     ValidateKubeletClientCSR) from a member of system:bootstrappers;
//   - "selfnodeclient": the same from the node it names (user
//     system:node:<name>, group system:nodes), renewing its certificate.
//
// Anything else is left for a person (kubectl certificate approve).
type Approver struct {
	s     *store.Store
	reg   *registry.Registry
	csrs  *store.Informer
	queue workqueue.TypedRateLimitingInterface[string]
}

// NewApprover returns the approver over the CSR informer; reg must serve
// certificates.CertificateSigningRequests.
func NewApprover(s *store.Store, reg *registry.Registry, csrs *store.Informer) *Approver {
	a := &Approver{s: s, reg: reg, csrs: csrs, queue: ctrlutil.NewQueue(ApproverName)}
	csrs.AddHandler(store.Handler{
		OnAdd:    func(o store.Object) { a.queue.Add(o.GetName()) },
		OnUpdate: func(_, n store.Object) { a.queue.Add(n.GetName()) },
	})
	return a
}

// Run approves with workers goroutines until ctx ends.
func (a *Approver) Run(ctx context.Context, workers int) {
	ctrlutil.RunWorkers(ctx, ApproverName, a.queue, workers, a.sync)
}

// Recognize returns the approval reason ("AutoApproved") and message for
// csr, or "" when orca does not approve it on its own.
func Recognize(csr *certificatesv1.CertificateSigningRequest) (reason, message string) {
	if csr.Spec.SignerName != KubeAPIServerClientKubeletSigner {
		return "", ""
	}
	req, err := parse(csr)
	if err != nil || ValidateKubeletClientCSR(req, csr.Spec.Usages) != nil {
		return "", ""
	}
	switch {
	case slices.Contains(csr.Spec.Groups, BootstrappersGroup):
		return "AutoApproved", "Auto approving kubelet client certificate after SubjectAccessReview."
	case csr.Spec.Username == req.Subject.CommonName && slices.Contains(csr.Spec.Groups, NodesGroup):
		return "AutoApproved", "Auto approving self kubelet client certificate after SubjectAccessReview."
	}
	return "", ""
}

func (a *Approver) sync(ctx context.Context, name string) error {
	obj, ok := a.csrs.Get("", name)
	if !ok {
		return nil
	}
	csr := obj.(*certificatesv1.CertificateSigningRequest)
	if len(csr.Status.Certificate) > 0 || certificates.HasCondition(csr, certificatesv1.CertificateApproved) ||
		certificates.HasCondition(csr, certificatesv1.CertificateDenied) || certificates.HasCondition(csr, certificatesv1.CertificateFailed) {
		return nil
	}
	reason, msg := Recognize(csr)
	if reason == "" {
		return nil
	}
	uid := csr.UID
	_, err := a.reg.GuaranteedUpdateSubresource(ctx, a.s, certificates.CertificateSigningRequests, "approval", "", name, &store.Preconditions{UID: &uid},
		func(cur store.Object) (store.Object, error) {
			c := cur.(*certificatesv1.CertificateSigningRequest)
			if certificates.HasCondition(c, certificatesv1.CertificateApproved) || certificates.HasCondition(c, certificatesv1.CertificateDenied) {
				return nil, errNothingToDo
			}
			now := metav1.Now()
			c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
				Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: reason, Message: msg,
				LastUpdateTime: now, LastTransitionTime: now})
			return c, nil
		})
	if err == errNothingToDo {
		return nil
	}
	if err != nil {
		return fmt.Errorf("approve certificate signing request %s: %w", name, err)
	}
	return nil
}

// errNothingToDo ends a guaranteed update that finds the work done.
var errNothingToDo = fmt.Errorf("nothing to do")
