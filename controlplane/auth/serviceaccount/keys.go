package serviceaccount

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/util/keyutil"

	"github.com/orca-edge/orca/controlplane/pki"
)

// LoadOrCreateSigningKey reads the PEM private key at path (EC, RSA or
// PKCS#8, as kube-apiserver's --service-account-signing-key-file) or,
// when the file does not exist, creates an ECDSA P-256 key there (mode
// 0600, its directory 0700), so tokens signed before a restart stay
// valid after it. A file that exists but holds no private key is an
// error naming the file.
func LoadOrCreateSigningKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		pemData, err := keyutil.MakeEllipticPrivateKeyPEM()
		if err != nil {
			return nil, fmt.Errorf("service account signing key: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("service account signing key %s: %w", path, err)
		}
		if err := pki.WriteFileAtomic(path, pemData, 0o600); err != nil { // a crash leaves no half key
			return nil, fmt.Errorf("service account signing key %s: %w", path, err)
		}
		return ParseSigningKey(pemData, path)
	}
	if err != nil {
		return nil, fmt.Errorf("service account signing key: %w", err)
	}
	return ParseSigningKey(data, path)
}

// ParseSigningKey parses a PEM private key (EC, RSA or PKCS#8) for
// signing ServiceAccount tokens: an ECDSA key on P-256, P-384 or P-521
// or an RSA key of at least 2048 bits. what names the source in errors.
func ParseSigningKey(data []byte, what string) (crypto.Signer, error) {
	k, err := keyutil.ParsePrivateKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("service account signing key %s: %w", what, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("service account signing key %s: %T cannot sign", what, k)
	}
	if _, err := signingAlgorithm(signer.Public()); err != nil {
		return nil, fmt.Errorf("service account signing key %s: %w", what, err)
	}
	return signer, nil
}

// LoadPublicKeys reads the PEM file of --service-account-key-file: public
// keys, certificates or private keys (whose public halves are used), as
// kube-apiserver's. Tokens signed by any of them verify.
func LoadPublicKeys(path string) ([]crypto.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("service account key file: %w", err)
	}
	if keys, err := keyutil.ParsePublicKeysPEM(data); err == nil {
		out := make([]crypto.PublicKey, 0, len(keys))
		for _, k := range keys {
			out = append(out, k)
		}
		return out, nil
	}
	if k, err := keyutil.ParsePrivateKeyPEM(data); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return []crypto.PublicKey{s.Public()}, nil
		}
	}
	return nil, fmt.Errorf("service account key file %s: no public or private key in PEM form", path)
}

// KeyID is the "kid" header of tokens signed with the key whose public
// half is pub: the unpadded base64url SHA-256 of its PKIX DER encoding,
// as kube-apiserver's keyIDFromPublicKey.
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("key id: %w", err)
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// signingAlgorithm returns the JWS algorithm of a key: ES256/ES384/ES512
// by curve, RS256 for RSA of >= 2048 bits.
func signingAlgorithm(pub crypto.PublicKey) (string, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return "ES256", nil
		case elliptic.P384():
			return "ES384", nil
		case elliptic.P521():
			return "ES512", nil
		}
		return "", fmt.Errorf("unsupported elliptic curve %s", k.Curve.Params().Name)
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return "", fmt.Errorf("an RSA key of %d bits is too small (at least 2048)", k.N.BitLen())
		}
		return "RS256", nil
	}
	return "", fmt.Errorf("unsupported key type %T (ECDSA or RSA)", pub)
}
