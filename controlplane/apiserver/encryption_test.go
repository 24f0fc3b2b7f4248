package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/auth/encryption"
	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestEncryptedSecretThroughTheRelay: a Secret written over HTTPS is
// ciphertext in its KV bucket, and the node whose pod references it reads
// it in plain text over the relay (the path the agent's env and volumes
// take), through the same chain (Node authorizer) as every request.
func TestEncryptedSecretThroughTheRelay(t *testing.T) {
	data, err := encryption.Default()
	if err != nil {
		t.Fatal(err)
	}
	conf, err := encryption.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withStoreConfig(func(c *store.Config) { c.Transformers = encryption.NewStatic(conf) }))
	ctx := context.Background()
	const pw = "s3cr3t-over-the-relay"
	e.must(http.StatusCreated, http.MethodPost, "/api/v1/namespaces/default/secrets", "application/json",
		map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "db"}, "stringData": map[string]string{"password": pw}}, nil)
	kv, err := e.st.JetStream().KeyValue(ctx, "secrets")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := kv.Get(ctx, store.Key("default", "db"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(raw.Value(), []byte(encryption.AESGCMPrefix+encryption.DefaultKeyName+":")) || bytes.Contains(raw.Value(), []byte("password")) {
		t.Fatalf("KV value %.60q", raw.Value())
	}
	if _, err := e.st.Create(ctx, store.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app"},
		Spec: corev1.PodSpec{NodeName: "edge-1", Containers: []corev1.Container{{Name: "c", Image: "i",
			EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}}}}}); err != nil {
		t.Fatal(err)
	}
	relay := nodeapi.NewRelay(e.nc, "edge-1")
	storetest.Eventually(t, 10*time.Second, func() error { // the Node authorizer's graph learns the pod
		resp, err := relay.Do(ctx, http.MethodGet, "/api/v1/namespaces/default/secrets/db", "", nil)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("relay GET: %d %s", resp.StatusCode, resp.Body)
		}
		var s corev1.Secret
		if err := json.Unmarshal(resp.Body, &s); err != nil {
			return err
		}
		if got := string(s.Data["password"]); got != pw {
			t.Fatalf("relay read %q", got)
		}
		return nil
	})
}
