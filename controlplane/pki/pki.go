// Package pki creates and keeps orca's cluster certificates, as k3s does
// on a server's first start: one cluster CA, a serving certificate for the
// apiserver and the embedded NATS server, and client certificates (the
// admin's, CN=system:admin O=system:masters), all ECDSA P-256. The CA is
// valid 10 years, leaf certificates 1 year; a leaf within 90 days of its
// end, or missing a wanted SAN, is issued again at the next start (k3s
// renews at 90 days too). Files are PEM: <name>.crt (0644) and <name>.key
// (0600) in one directory (orca-server's <data-dir>/tls).
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

const (
	// CAValidity is how long a created cluster CA is valid: 10 years.
	CAValidity = 10 * 365 * 24 * time.Hour
	// LeafValidity is how long an issued leaf certificate is valid: 1 year.
	LeafValidity = 365 * 24 * time.Hour
	// RenewBefore is how close to its end a leaf certificate is renewed
	// when loaded with LoadOrIssue: 90 days, as k3s.
	RenewBefore = 90 * 24 * time.Hour
	// CAName is the file name (without .crt/.key) of the cluster CA.
	CAName = "ca"
)

// CA is a certificate authority with its private key.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM is Cert PEM-encoded (what clients trust: a kubeconfig's
	// certificate-authority-data, ca.crt in a pod).
	CertPEM []byte
}

// KeyPair is an issued certificate and its key, PEM-encoded.
type KeyPair struct {
	CertPEM, KeyPEM []byte
	Cert            *x509.Certificate
}

// LoadOrCreateCA reads dir/ca.crt and dir/ca.key, or creates a new CA
// named "orca-ca@<unix time>" (k3s: "k3s-server-ca@<time>") when neither
// exists. dir is created 0700 when missing. Only one of the two files
// existing, or files that do not parse, is an error: a CA is never
// replaced silently, since every issued certificate depends on it.
func LoadOrCreateCA(dir string) (*CA, error) {
	crtPath, keyPath := filepath.Join(dir, CAName+".crt"), filepath.Join(dir, CAName+".key")
	_, errC := os.Stat(crtPath)
	_, errK := os.Stat(keyPath)
	switch {
	case errC == nil && errK == nil:
		return LoadCA(crtPath, keyPath)
	case errors.Is(errC, os.ErrNotExist) && errors.Is(errK, os.ErrNotExist):
	default:
		return nil, fmt.Errorf("cluster CA in %s: need both %s.crt and %s.key (or neither, to create one)", dir, CAName, CAName)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("orca-ca@%d", now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	kp, err := encode(der, key)
	if err != nil {
		return nil, err
	}
	if err := writePair(dir, CAName, kp); err != nil {
		return nil, err
	}
	return &CA{Cert: kp.Cert, Key: key, CertPEM: kp.CertPEM}, nil
}

// LoadCA reads a CA certificate and its key (PEM; the key PKCS#8, EC or
// PKCS#1).
func LoadCA(certFile, keyFile string) (*CA, error) {
	kp, key, err := loadPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	if !kp.Cert.IsCA {
		return nil, fmt.Errorf("%s is not a CA certificate", certFile)
	}
	return &CA{Cert: kp.Cert, Key: key, CertPEM: kp.CertPEM}, nil
}

// ServingSANs are the names and addresses of a serving certificate: the
// host name, every non-loopback address of the machine, 127.0.0.1, ::1,
// localhost, the in-cluster names of the kubernetes Service
// (kubernetes, kubernetes.default, kubernetes.default.svc,
// kubernetes.default.svc.cluster.local) and extra (--tls-san: DNS names or
// IPs), without duplicates.
func ServingSANs(extra ...string) []string {
	var sans []string
	add := func(s string) {
		if s != "" && !slices.Contains(sans, s) {
			sans = append(sans, s)
		}
	}
	if h, err := os.Hostname(); err == nil {
		add(strings.ToLower(h))
	}
	add("localhost")
	for _, n := range []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"} {
		add(n)
	}
	add("127.0.0.1")
	add("::1")
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
				add(ipn.IP.String())
			}
		}
	}
	for _, e := range extra {
		add(strings.TrimSpace(e))
	}
	return sans
}

// IssueServing issues a serving certificate (server and client auth, so
// NATS routes may use it both ways) for sans (DNS names and IP
// addresses), valid LeafValidity.
func (ca *CA) IssueServing(cn string, sans []string) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := leafTemplate(pkix.Name{CommonName: cn}, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	for _, s := range sans {
		if ip := net.ParseIP(s); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}
	return ca.sign(tmpl, key)
}

// IssueClient issues a client certificate for user cn in groups orgs
// (Kubernetes' x509 authentication: CN is the user name, each O a group),
// valid LeafValidity.
func (ca *CA) IssueClient(cn string, orgs ...string) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return ca.sign(leafTemplate(pkix.Name{CommonName: cn, Organization: orgs}, x509.ExtKeyUsageClientAuth), key)
}

// Pool returns a certificate pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// LoadOrIssue reads dir/<name>.crt and .key and returns them when they are
// signed by ca, valid for more than RenewBefore, and (for a serving
// certificate) cover every SAN in sans; otherwise it calls issue and
// writes its result there.
func (ca *CA) LoadOrIssue(dir, name string, sans []string, issue func() (*KeyPair, error)) (*KeyPair, error) {
	kp, _, err := loadPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
	if err == nil && ca.current(kp.Cert, sans) {
		return kp, nil
	}
	kp, err = issue()
	if err != nil {
		return nil, err
	}
	if err := writePair(dir, name, kp); err != nil {
		return nil, err
	}
	return kp, nil
}

// current reports whether cert is signed by ca, not close to its end and
// covers sans.
func (ca *CA) current(cert *x509.Certificate, sans []string) bool {
	if cert.CheckSignatureFrom(ca.Cert) != nil || time.Until(cert.NotAfter) < RenewBefore {
		return false
	}
	for _, s := range sans {
		if ip := net.ParseIP(s); ip != nil {
			if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
				return false
			}
		} else if !slices.Contains(cert.DNSNames, s) {
			return false
		}
	}
	return true
}

func leafTemplate(subj pkix.Name, usage ...x509.ExtKeyUsage) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subj,
		NotBefore:    now.Add(-time.Hour), // tolerate clocks a little behind
		NotAfter:     now.Add(LeafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usage,
	}
}

func (ca *CA) sign(tmpl *x509.Certificate, key *ecdsa.PrivateKey) (*KeyPair, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issue certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	return encode(der, key)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return n
}

func encode(der []byte, key *ecdsa.PrivateKey) (*KeyPair, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		Cert:    cert,
	}, nil
}

// writePair writes dir/name.crt (0644) and dir/name.key (0600), each
// through a temporary file renamed into place, so a crash never leaves
// half a key.
func writePair(dir, name string, kp *KeyPair) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := WriteFileAtomic(filepath.Join(dir, name+".key"), kp.KeyPEM, 0o600); err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, name+".crt"), kp.CertPEM, 0o644)
}

// WriteFileAtomic writes data to path with mode perm through a temporary
// file in the same directory renamed over path.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// loadPair reads a PEM certificate (the first of the file) and its key.
func loadPair(certFile, keyFile string) (*KeyPair, crypto.Signer, error) {
	cpem, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, err
	}
	kpem, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, err
	}
	cert, err := ParseCertPEM(cpem)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", certFile, err)
	}
	key, err := ParseKeyPEM(kpem)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, nil, fmt.Errorf("%s does not match the key in %s", certFile, keyFile)
	}
	return &KeyPair{CertPEM: cpem, KeyPEM: kpem, Cert: cert}, key, nil
}

// ParseCertPEM parses the first CERTIFICATE block of data.
func ParseCertPEM(data []byte) (*x509.Certificate, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("no PEM CERTIFICATE block")
		}
		if b.Type == "CERTIFICATE" {
			return x509.ParseCertificate(b.Bytes)
		}
	}
}

// ParseKeyPEM parses a PEM private key: PKCS#8, SEC 1 EC or PKCS#1 RSA.
func ParseKeyPEM(data []byte) (crypto.Signer, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("no PEM private key block")
		}
		switch b.Type {
		case "EC PRIVATE KEY":
			return x509.ParseECPrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			return x509.ParsePKCS1PrivateKey(b.Bytes)
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
			if err != nil {
				return nil, err
			}
			s, ok := k.(crypto.Signer)
			if !ok {
				return nil, fmt.Errorf("unsupported private key type %T", k)
			}
			return s, nil
		}
	}
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	da, err1 := x509.MarshalPKIXPublicKey(a)
	db, err2 := x509.MarshalPKIXPublicKey(b)
	return err1 == nil && err2 == nil && bytes.Equal(da, db)
}
