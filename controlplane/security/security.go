// Package security sets up what orca-server needs to be secure by default,
// so that the binary and the tests run the same code: the cluster CA and
// certificates (controlplane/pki, under <data-dir>/tls), the apiserver's
// TLS configuration, its authenticators and authorizer (the fields of
// apiserver.Config), the admin kubeconfig, and the TLS configurations of
// the NATS server and its clients.
//
// Authentication follows kube-apiserver: a request is authenticated by the
// first authenticator that recognises its credentials (x509 client
// certificates signed by the client CA: CN user, O groups; bearer tokens
// of --token-auth-file), and every authenticated user is in the group
// system:authenticated.
//
// Authorization is kube-apiserver's Node,RBAC (see Chain): system:masters
// may do anything, nodes what the Node authorizer allows, everyone else
// what RBAC grants them (the default policy: controlplane/auth/rbac/bootstrappolicy).
package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/nats-io/nats.go"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/orca-edge/orca/controlplane/auth/authz"
	"github.com/orca-edge/orca/controlplane/auth/clientcert"
	"github.com/orca-edge/orca/controlplane/auth/node"
	"github.com/orca-edge/orca/controlplane/auth/rbac"
	"github.com/orca-edge/orca/controlplane/auth/serviceaccount"
	"github.com/orca-edge/orca/controlplane/pki"
	"github.com/orca-edge/orca/controlplane/registry/core"
	regrbac "github.com/orca-edge/orca/controlplane/registry/rbac"
	"github.com/orca-edge/orca/controlplane/store"
)

// File names under the TLS directory (<data-dir>/tls).
const (
	// ServingName is the serving certificate of the apiserver and the
	// embedded NATS server: serving.crt, serving.key.
	ServingName = "serving"
	// AdminName is the admin's client certificate: admin.crt, admin.key
	// (CN system:admin, O system:masters).
	AdminName = "admin"
	// AdminUser is the admin's user name, as k3s'.
	AdminUser = "system:admin"
)

// Options are orca-server's security flags (Kubernetes' names).
type Options struct {
	// DataDir is orca-server's --data-dir; certificates live in
	// DataDir/tls. Required.
	DataDir string
	// TLSCertFile and TLSPrivateKeyFile (--tls-cert-file,
	// --tls-private-key-file) replace the created serving certificate;
	// both or neither.
	TLSCertFile, TLSPrivateKeyFile string
	// ClientCAFile (--client-ca-file) is the PEM bundle client
	// certificates are verified with, instead of the cluster CA. The admin
	// kubeconfig's certificate is still signed by the cluster CA, so it
	// works only when that CA is in the bundle.
	ClientCAFile string
	// TLSSANs (--tls-san) are extra DNS names or IPs of the created
	// serving certificate (ServingSANs lists the others).
	TLSSANs []string
	// TokenAuthFile (--token-auth-file) is a CSV of static bearer tokens
	// as kube-apiserver reads it: token,user,uid,"group1,group2". Read
	// once at start.
	TokenAuthFile string
	// ServiceAccounts are the ServiceAccount token flags
	// (serviceaccount.go).
	ServiceAccounts ServiceAccountOptions
}

// Material is the loaded or created security state of one orca-server.
type Material struct {
	// Dir is the TLS directory (<data-dir>/tls).
	Dir string
	// CA is the cluster CA (always created, even when the serving
	// certificate or the client CA come from flags: it signs the admin's
	// and the nodes' client certificates).
	CA *pki.CA
	// Serving is the serving certificate of the apiserver and NATS.
	Serving tls.Certificate
	// ServingCAPEM is the PEM bundle clients verify Serving with: the
	// cluster CA, or nothing known when --tls-cert-file is set (then the
	// certificate's own chain is expected to be trusted elsewhere).
	ServingCAPEM []byte
	// ClientCAs verifies client certificates.
	ClientCAs *x509.CertPool
	// Admin is the admin's client certificate (CN system:admin, O
	// system:masters), reused across starts while current.
	Admin *pki.KeyPair
	// Authenticators are tried in order by Authenticator; authenticators
	// of other kinds (ServiceAccount tokens, bootstrap tokens) are
	// appended to it before Chain is called.
	Authenticators []authenticator.Request

	serviceAccounts *serviceAccountMaterial // signing and verification keys
}

// Load creates or reads the certificates under o.DataDir/tls: the
// cluster CA, the serving certificate (for pki.ServingSANs(o.TLSSANs...),
// unless o.TLSCertFile is set) and the admin's client certificate; and
// reads o.ClientCAFile and o.TokenAuthFile when set. Errors name the
// file that failed.
func Load(o Options) (*Material, error) {
	if o.DataDir == "" {
		return nil, errors.New("security: DataDir is required")
	}
	if (o.TLSCertFile == "") != (o.TLSPrivateKeyFile == "") {
		return nil, errors.New("--tls-cert-file and --tls-private-key-file go together")
	}
	dir := filepath.Join(o.DataDir, "tls")
	ca, err := pki.LoadOrCreateCA(dir)
	if err != nil {
		return nil, err
	}
	m := &Material{Dir: dir, CA: ca, ClientCAs: ca.Pool()}
	if o.TLSCertFile != "" {
		if m.Serving, err = tls.LoadX509KeyPair(o.TLSCertFile, o.TLSPrivateKeyFile); err != nil {
			return nil, fmt.Errorf("--tls-cert-file: %w", err)
		}
	} else {
		sans := pki.ServingSANs(o.TLSSANs...)
		kp, err := ca.LoadOrIssue(dir, ServingName, sans, func() (*pki.KeyPair, error) { return ca.IssueServing("orca-apiserver", sans) })
		if err != nil {
			return nil, err
		}
		if m.Serving, err = tls.X509KeyPair(kp.CertPEM, kp.KeyPEM); err != nil {
			return nil, err
		}
		// The chain names the CA too (as k3s' does): a joining agent
		// checks it against --discovery-token-ca-cert-hash before it
		// trusts the server.
		m.Serving.Certificate = append(m.Serving.Certificate, ca.Cert.Raw)
		m.ServingCAPEM = ca.CertPEM
	}
	if o.ClientCAFile != "" {
		data, err := os.ReadFile(o.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("--client-ca-file: %w", err)
		}
		m.ClientCAs = x509.NewCertPool()
		if !m.ClientCAs.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("--client-ca-file %s: no PEM certificate", o.ClientCAFile)
		}
	}
	if m.Admin, err = ca.LoadOrIssue(dir, AdminName, nil, func() (*pki.KeyPair, error) {
		return ca.IssueClient(AdminUser, user.SystemPrivilegedGroup)
	}); err != nil {
		return nil, err
	}
	opts := x509request.DefaultVerifyOptions()
	opts.Roots = m.ClientCAs
	// Each chain verified once, not on every request of a connection.
	m.Authenticators = append(m.Authenticators, clientcert.New(opts, x509request.CommonNameUserConversion, 0))
	if o.TokenAuthFile != "" {
		tokens, err := tokenfile.NewCSV(o.TokenAuthFile)
		if err != nil {
			return nil, fmt.Errorf("--token-auth-file: %w", err)
		}
		m.Authenticators = append(m.Authenticators, bearertoken.New(tokens))
	}
	if m.serviceAccounts, err = loadServiceAccountKeys(dir, o.ServiceAccounts); err != nil {
		return nil, err
	}
	return m, nil
}

// ServerTLS is the apiserver's TLS configuration: the serving certificate,
// TLS 1.2 or newer, and client certificates requested but verified by the
// x509 authenticator (as kube-apiserver: a bad certificate is a 401, not a
// failed handshake). HTTP/2 is offered.
func (m *Material) ServerTLS() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{m.Serving},
		MinVersion:   tls.VersionTLS12,
		ClientAuth:   tls.RequestClientCert,
		NextProtos:   []string{"h2", "http/1.1"},
	}
}

// NATSServerTLS is the embedded NATS server's TLS configuration for its
// clients: the serving certificate, TLS 1.2 or newer. Clients are
// identified by their NATS credentials, not by certificates.
func (m *Material) NATSServerTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{m.Serving}, MinVersion: tls.VersionTLS12}
}

// NATSClientTLS is a nats.go option verifying the NATS server with the
// cluster CA when the server asks for TLS; unlike nats.Secure it does not
// require TLS, so a plain NATS (an external one without TLS) still works.
func (m *Material) NATSClientTLS() nats.Option {
	return func(o *nats.Options) error {
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: m.CA.Pool()}
		return nil
	}
}

// Chain is what apiserver.Config needs for authentication and
// authorization (its TLS, Authenticator, Authorizer and RuleResolver
// fields).
type Chain struct {
	TLS           *tls.Config
	Authenticator authenticator.Request
	Authorizer    authorizer.Authorizer
	RuleResolver  authorizer.RuleResolver
	// ServiceAccountTokens issues TokenRequests
	// (apiserver.Config.ServiceAccountTokens).
	ServiceAccountTokens *serviceaccount.Issuer
	// RBAC is the RBAC authorizer inside Authorizer, for apiserver.Config.RBAC.
	RBAC *rbac.Authorizer
}

// Chain returns the apiserver's chain over st: TLS (ServerTLS), the union
// of m.Authenticators with system:authenticated added to every user, and
// the authorizer of kube-apiserver's --authorization-mode=Node,RBAC:
// members of system:masters first (authz.PrivilegedGroups, as
// kube-apiserver's), then the Node authorizer (controlplane/auth/node),
// then RBAC (controlplane/auth/rbac), both over informers of st that run
// until ctx ends (Chain waits for their first list). RuleResolver is
// RBAC's (SelfSubjectRulesReview); RBAC also checks writes of roles and
// bindings for escalation (apiserver.Config.RBAC).
func (m *Material) Chain(ctx context.Context, st *store.Store) (*Chain, error) {
	return m.ChainWithInformers(ctx, st, nil)
}

// ChainWithInformers is Chain with the Node authorizer and RBAC over the
// process's shared informers (pods; roles, role bindings, cluster roles
// and their bindings), which their owner must have started
// (SharedInformers.Start), instead of informers of their own. Nil
// informers: Chain.
func (m *Material) ChainWithInformers(ctx context.Context, st *store.Store, informers *store.SharedInformers) (*Chain, error) {
	var nodes *node.Authorizer
	var roles *rbac.Authorizer
	if informers == nil {
		nodes, roles = node.New(st), rbac.NewFromStore(st)
		go nodes.Run(ctx)
		go roles.Run(ctx)
	} else {
		var err error
		if nodes, err = node.NewWithInformer(informers.For(store.Pods)); err != nil {
			return nil, fmt.Errorf("security: %w", err)
		}
		nodes.SetClaims(informers.For(core.PersistentVolumeClaims))
		roles = rbac.New(informers.For(regrbac.Roles), informers.For(regrbac.RoleBindings), informers.For(regrbac.ClusterRoles), informers.For(regrbac.ClusterRoleBindings))
	}
	if !nodes.WaitForSync(ctx) || !roles.WaitForSync(ctx) {
		return nil, fmt.Errorf("security: authorizer informers did not sync: %w", ctx.Err())
	}
	a, err := authz.New(
		authz.Named{AuthorizerName: "Privileged", Authorizer: authz.PrivilegedGroups(user.SystemPrivilegedGroup)},
		authz.Named{AuthorizerName: "Node", Authorizer: nodes},
		authz.Named{AuthorizerName: "RBAC", Authorizer: roles},
	)
	if err != nil {
		return nil, err
	}
	tokens, err := m.tokenAuthenticators(st)
	if err != nil {
		return nil, err
	}
	authns := append(slices.Clip(m.Authenticators), tokens...)
	return &Chain{
		TLS:                  m.ServerTLS(),
		Authenticator:        group.NewAuthenticatedGroupAdder(union.New(authns...)),
		Authorizer:           a,
		RuleResolver:         roles,
		RBAC:                 roles,
		ServiceAccountTokens: m.ServiceAccountTokens(st),
	}, nil
}

// WriteAdminKubeconfig writes the admin's kubeconfig (cluster, user and
// context "orca", server, the serving CA and the admin's client
// certificate) to path with mode.
func (m *Material) WriteAdminKubeconfig(path string, mode os.FileMode, server string) error {
	return pki.WriteKubeconfig(path, mode, "orca", server, "", m.ServingCAPEM, m.Admin)
}

// ClientTLS is the TLS configuration of a client of this server (NATS or
// HTTPS): it verifies the serving certificate with the cluster CA and
// presents kp when not nil.
func (m *Material) ClientTLS(kp *pki.KeyPair) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: m.CA.Pool()}
	if kp != nil {
		cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// PublicInfoPath reports whether path is a health or version check, the
// paths anyone may read (Kubernetes' system:public-info-viewer) and that
// get the user system:anonymous without credentials.
func PublicInfoPath(path string) bool {
	for _, p := range []string{"/healthz", "/livez", "/readyz", "/version"} {
		if path == p || len(path) > len(p) && path[:len(p)+1] == p+"/" {
			return true
		}
	}
	return false
}
