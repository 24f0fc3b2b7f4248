package pki

import (
	"fmt"
	"os"
	"path/filepath"

	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"
)

// Kubeconfig returns a kubeconfig (kubectl's v1 Config, YAML) with one
// cluster, user and context named name: server is the apiserver URL
// ("https://127.0.0.1:6443"), namespace the context's namespace ("" for
// kubectl's default), caPEM the CA its serving certificate is checked
// with, and client the user's certificate and key, embedded as data so
// the file stands alone.
func Kubeconfig(name, server, namespace string, caPEM []byte, client *KeyPair) ([]byte, error) {
	cfg := clientcmdv1.Config{
		Kind:           "Config",
		APIVersion:     "v1",
		CurrentContext: name,
		Clusters:       []clientcmdv1.NamedCluster{{Name: name, Cluster: clientcmdv1.Cluster{Server: server, CertificateAuthorityData: caPEM}}},
		AuthInfos:      []clientcmdv1.NamedAuthInfo{{Name: name, AuthInfo: clientcmdv1.AuthInfo{ClientCertificateData: client.CertPEM, ClientKeyData: client.KeyPEM}}},
		Contexts:       []clientcmdv1.NamedContext{{Name: name, Context: clientcmdv1.Context{Cluster: name, AuthInfo: name, Namespace: namespace}}},
	}
	return yaml.Marshal(cfg)
}

// WriteKubeconfig writes Kubeconfig(name, server, namespace, caPEM,
// client) to path with mode (0600 for an admin's: it holds a key),
// creating its directory (0700) when missing; an existing file is
// replaced whole.
func WriteKubeconfig(path string, mode os.FileMode, name, server, namespace string, caPEM []byte, client *KeyPair) error {
	data, err := Kubeconfig(name, server, namespace, caPEM, client)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	if err := WriteFileAtomic(path, data, mode); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}
