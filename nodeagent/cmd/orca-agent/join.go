package main

// Joining a cluster with a bootstrap token, as `kubeadm join` and the
// kubelet's TLS bootstrap do:
//
//  1. Discovery: the agent dials --server with TLS and accepts it only if
//     a CA certificate in the chain the server presents has the SPKI
//     SHA-256 of --discovery-token-ca-cert-hash and signed the serving
//     certificate for that host (kubeadm's token discovery with a pinned
//     CA). Nothing, not the token either, is sent before.
//  2. Node certificate: it creates an ECDSA P-256 key and a
//     CertificateSigningRequest (certificates.k8s.io/v1, signer
//     kubernetes.io/kube-apiserver-client-kubelet, CN system:node:<name>,
//     O system:nodes) authenticated with the bootstrap token, and waits for
//     the control plane to approve and sign it.
//  3. NATS credentials: with that certificate it creates a
//     NATSCredentialRequest for a fresh nkey (node permissions for itself
//     only) and writes the user JWT with the seed as a .creds file.
//
// Everything lands under <data-dir>/pki (ca.crt, node.crt, node.key) and
// <data-dir>/nats (node.creds, servers, ca.crt), files 0600 and
// directories 0700; a later start reuses them and needs no token.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/auth/natsauth"
)

// joinOptions are the flags of joining (kubeadm join's names).
type joinOptions struct {
	server  string
	token   string
	caHash  string
	timeout time.Duration
}

// joined is what a join leaves on disk, or what an earlier one left.
type joined struct {
	creds   string   // .creds file
	servers []string // NATS URLs the control plane handed out
	natsCA  string   // PEM file of the NATS servers' CA, "" when none
}

// joinPaths are the files of a joined agent under dataDir.
func joinPaths(dataDir string) (pki, natsDir string) {
	return filepath.Join(dataDir, "pki"), filepath.Join(dataDir, "nats")
}

// loadJoined returns the credentials an earlier join wrote, if any.
func loadJoined(dataDir string) (*joined, bool) {
	_, natsDir := joinPaths(dataDir)
	j := &joined{creds: filepath.Join(natsDir, "node.creds")}
	data, err := os.ReadFile(j.creds)
	if err != nil {
		return nil, false
	}
	tok, err := jwt.ParseDecoratedJWT(data)
	if err != nil {
		return nil, false
	}
	if uc, err := jwt.DecodeUserClaims(tok); err != nil || (uc.Expires != 0 && time.Until(time.Unix(uc.Expires, 0)) < time.Hour) {
		return nil, false // expired or about to: join again
	}
	if s, err := os.ReadFile(filepath.Join(natsDir, "servers")); err == nil {
		j.servers = strings.Fields(string(s))
	}
	if ca := filepath.Join(natsDir, "ca.crt"); fileExists(ca) {
		j.natsCA = ca
	}
	return j, true
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// join runs the three steps for node and writes their results.
func join(ctx context.Context, o joinOptions, node, dataDir string) (*joined, error) {
	if o.server == "" || o.token == "" || o.caHash == "" {
		return nil, errors.New("join: --server, --token and --discovery-token-ca-cert-hash are all needed (the hash is printed by `orca token create --print-join-command`)")
	}
	u, err := url.Parse(o.server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("join: --server %q: want https://host:port", o.server)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	pkiDir, natsDir := joinPaths(dataDir)
	for _, d := range []string{pkiDir, natsDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}

	// 1. Discovery.
	ca, err := discoverCA(ctx, u.Host, o.caHash)
	if err != nil {
		return nil, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	if err := writeFile(filepath.Join(pkiDir, "ca.crt"), caPEM); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	slog.Info("join: cluster CA verified", "server", o.server, "hash", o.caHash)

	// 2. Node certificate.
	cert, err := requestNodeCert(ctx, o, pool, node, pkiDir)
	if err != nil {
		return nil, err
	}
	slog.Info("join: node certificate issued", "subject", cert.Leaf.Subject.String(), "notAfter", cert.Leaf.NotAfter)

	// 3. NATS credentials.
	j, err := requestNATSCreds(ctx, o.server, pool, cert, natsDir)
	if err != nil {
		return nil, err
	}
	slog.Info("join: NATS credentials issued", "servers", j.servers)
	return j, nil
}

// discoverCA dials host and returns the CA certificate of the chain it
// presents whose SPKI SHA-256 is hash ("sha256:<hex>"), once that CA
// verifies the serving certificate for the host.
func discoverCA(ctx context.Context, host, hash string) (*x509.Certificate, error) {
	want, ok := strings.CutPrefix(hash, "sha256:")
	if !ok || len(want) != 64 {
		return nil, fmt.Errorf("join: --discovery-token-ca-cert-hash %q: want sha256:<64 hex digits>", hash)
	}
	want = strings.ToLower(want)
	var found *x509.Certificate
	serverName, _, _ := net.SplitHostPort(host)
	d := tls.Dialer{Config: &tls.Config{
		InsecureSkipVerify: true, // verified below against the pinned CA, before anything is sent
		MinVersion:         tls.VersionTLS12,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			var certs []*x509.Certificate
			for _, r := range raw {
				c, err := x509.ParseCertificate(r)
				if err != nil {
					return err
				}
				certs = append(certs, c)
			}
			if len(certs) == 0 {
				return errors.New("the server presented no certificate")
			}
			for _, c := range certs {
				sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
				if c.IsCA && hex.EncodeToString(sum[:]) == want {
					found = c
				}
			}
			if found == nil {
				return fmt.Errorf("no CA certificate in the chain the server presented has the public key hash %s", hash)
			}
			pool := x509.NewCertPool()
			pool.AddCert(found)
			inter := x509.NewCertPool()
			for _, c := range certs[1:] {
				inter.AddCert(c)
			}
			_, err := certs[0].Verify(x509.VerifyOptions{DNSName: serverName, Roots: pool, Intermediates: inter})
			return err
		},
	}}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, fmt.Errorf("join: discovery of the cluster CA at %s: %w", host, err)
	}
	conn.Close()
	return found, nil
}

// requestNodeCert creates the node key and a CSR, authenticated with the
// bootstrap token, and waits until the CSR carries a certificate.
func requestNodeCert(ctx context.Context, o joinOptions, pool *x509.CertPool, node, pkiDir string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+o.token) }
	sum := sha256.Sum256(der)
	csr := &certificatesv1.CertificateSigningRequest{
		TypeMeta:   metav1.TypeMeta{APIVersion: "certificates.k8s.io/v1", Kind: "CertificateSigningRequest"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-csr-" + hex.EncodeToString(sum[:8])},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
	path := "/apis/certificates.k8s.io/v1/certificatesigningrequests"
	if err := apiCall(ctx, hc, http.MethodPost, o.server+path, csr, nil, bearer); err != nil {
		return tls.Certificate{}, fmt.Errorf("join: create CertificateSigningRequest %s: %w", csr.Name, err)
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		var got certificatesv1.CertificateSigningRequest
		if err := apiCall(ctx, hc, http.MethodGet, o.server+path+"/"+csr.Name, nil, &got, bearer); err != nil && (!transient(err) || ctx.Err() != nil) {
			return tls.Certificate{}, fmt.Errorf("join: read CertificateSigningRequest %s: %w", csr.Name, err)
		} // a 429 or 5xx of a loaded server: read again at the next tick
		for _, c := range got.Status.Conditions {
			if c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
				return tls.Certificate{}, fmt.Errorf("join: CertificateSigningRequest %s %s: %s %s", csr.Name, c.Type, c.Reason, c.Message)
			}
		}
		if len(got.Status.Certificate) > 0 {
			keyDER, err := x509.MarshalECPrivateKey(key)
			if err != nil {
				return tls.Certificate{}, err
			}
			keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
			cert, err := tls.X509KeyPair(got.Status.Certificate, keyPEM)
			if err != nil {
				return tls.Certificate{}, fmt.Errorf("join: the certificate of CertificateSigningRequest %s: %w", csr.Name, err)
			}
			if err := writeFile(filepath.Join(pkiDir, "node.key"), keyPEM); err != nil {
				return tls.Certificate{}, err
			}
			if err := writeFile(filepath.Join(pkiDir, "node.crt"), got.Status.Certificate); err != nil {
				return tls.Certificate{}, err
			}
			return cert, nil
		}
		select {
		case <-ctx.Done():
			return tls.Certificate{}, fmt.Errorf("join: CertificateSigningRequest %s was not approved and signed in time (is the csr approver running?): %w", csr.Name, ctx.Err())
		case <-tick.C:
		}
	}
}

// requestNATSCreds asks, as the node, for NATS credentials of a fresh
// nkey and writes them.
func requestNATSCreds(ctx context.Context, server string, pool *x509.CertPool, cert tls.Certificate, natsDir string) (*joined, error) {
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	pub, _ := kp.PublicKey()
	req := &natsauth.NATSCredentialRequest{TypeMeta: metav1.TypeMeta{APIVersion: natsauth.Group + "/" + natsauth.Version, Kind: natsauth.Kind},
		Spec: natsauth.NATSCredentialRequestSpec{PublicKey: pub}}
	var out natsauth.NATSCredentialRequest
	if err := apiCall(ctx, hc, http.MethodPost, server+"/apis/orca.dev/v1/natscredentialrequests", req, &out); err != nil {
		return nil, fmt.Errorf("join: NATSCredentialRequest: %w", err)
	}
	seed, _ := kp.Seed()
	creds, err := jwt.FormatUserConfig(out.Status.JWT, seed)
	if err != nil {
		return nil, fmt.Errorf("join: NATS credentials: %w", err)
	}
	j := &joined{creds: filepath.Join(natsDir, "node.creds"), servers: out.Status.Servers}
	if len(out.Status.CABundle) > 0 {
		j.natsCA = filepath.Join(natsDir, "ca.crt")
		if err := writeFile(j.natsCA, out.Status.CABundle); err != nil {
			return nil, err
		}
	}
	if err := writeFile(filepath.Join(natsDir, "servers"), []byte(strings.Join(out.Status.Servers, "\n")+"\n")); err != nil {
		return nil, err
	}
	// Last: its presence means the join is complete.
	if err := writeFile(j.creds, creds); err != nil {
		return nil, err
	}
	return j, nil
}

// apiCall sends in (JSON, nil for none) and decodes a 2xx answer into out
// (when not nil); other answers are errors with the Status message.
func apiCall(ctx context.Context, hc *http.Client, method, url string, in, out any, edit ...func(*http.Request)) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	r, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	r.Header.Set("Accept", "application/json")
	if in != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	for _, e := range edit {
		e(r)
	}
	resp, err := hc.Do(r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var st metav1.Status
		if json.Unmarshal(data, &st) == nil && st.Message != "" {
			return &statusError{code: resp.StatusCode, msg: fmt.Sprintf("%s (%d)", st.Message, resp.StatusCode)}
		}
		return &statusError{code: resp.StatusCode, msg: fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(data))}
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// statusError is an apiserver's answer other than 2xx.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// transient reports whether err is an answer worth asking again: 429
// (the apiserver's in-flight limits) or a 5xx.
func transient(err error) bool {
	var se *statusError
	return errors.As(err, &se) && (se.code == http.StatusTooManyRequests || se.code >= 500)
}

// writeFile writes data to path with mode 0600, atomically.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// natsIdentity returns the NATS connect options of the agent's identity
// and the URL to connect to: the .creds of --nats-creds, or of an earlier
// join, or of a join now (--token); with none of them the agent connects
// without credentials (a server without NATS accounts). bindOnly is true
// with credentials: a node has no right to create buckets.
func natsIdentity(ctx context.Context, o options, natsURLSet bool) (opts []nats.Option, natsURL string, bindOnly bool, err error) {
	natsURL = o.natsURL
	j, ok := &joined{creds: o.natsCreds}, o.natsCreds != ""
	if !ok {
		j, ok = loadJoined(o.dataDir)
	}
	if !ok && o.join.token != "" {
		if j, err = join(ctx, o.join, o.nodeName, o.dataDir); err != nil {
			return nil, "", false, err
		}
		ok = true
	}
	if !ok {
		if _, natsDir := joinPaths(o.dataDir); fileExists(filepath.Join(natsDir, "node.creds")) {
			return nil, "", false, fmt.Errorf("the NATS credentials under %s expired (or expire within the hour): join again with --server, --token and --discovery-token-ca-cert-hash", natsDir)
		}
		return nil, natsURL, false, nil
	}
	opts = []nats.Option{nats.UserCredentials(j.creds), nats.CustomInboxPrefix(natsauth.NodeInboxPrefix(o.nodeName))}
	if j.natsCA != "" {
		opts = append(opts, nats.RootCAs(j.natsCA))
	}
	if !natsURLSet && len(j.servers) > 0 {
		natsURL = strings.Join(j.servers, ",")
	}
	return opts, natsURL, true, nil
}
