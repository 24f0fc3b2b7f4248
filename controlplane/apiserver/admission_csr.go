package apiserver

import (
	"context"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/orca-edge/orca/controlplane/registry/certificates"
)

// admitCertificateSigningRequest records the requesting user in a new
// CSR's spec.username, uid, groups and extra, replacing whatever the
// client sent, as Kubernetes' CSR strategy PrepareForCreate: the
// approver decides on who asked, which only the apiserver knows.
func admitCertificateSigningRequest(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) {
	u, ok := request.UserFrom(ctx)
	if !ok {
		certificates.SetRequester(csr, "", "", nil, nil)
		return
	}
	certificates.SetRequester(csr, u.GetName(), u.GetUID(), u.GetGroups(), u.GetExtra())
}
