package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/orca-edge/orca/controlplane/auth/bootstrap"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// orcaServer builds and starts the real orca-server on a temporary data
// dir and returns its API URL, the admin's client and the data dir.
func orcaServer(t *testing.T) (api string, client *http.Client, dataDir string) {
	t.Helper()
	dir := t.TempDir()
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(dir, "orca-server")
	build := exec.Command("go", "build", "-o", bin, "./controlplane/cmd/orca-server")
	build.Dir = filepath.Join(filepath.Dir(file), "..", "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build orca-server: %v\n%s", err, out)
	}
	apiAddr, natsAddr := freeAddr(t), freeAddr(t)
	dataDir = filepath.Join(dir, "data")
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	srv := exec.Command(bin, "--data-dir", dataDir, "--nats-listen", natsAddr, "--apiserver-addr", apiAddr, "--log-level", "warn",
		"--nats-sync-always=false", "--service-cidr", fmt.Sprintf("127.%d.0.0/16", 150+os.Getpid()%50))
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			srv.Process.Kill()
			<-exited
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("orca-server log (last 3000 bytes):\n%s", b[max(0, len(b)-3000):])
		}
	})
	api = "https://" + apiAddr
	storetest.Eventually(t, 60*time.Second, func() error {
		select {
		case err := <-exited:
			t.Fatalf("orca-server exited: %v", err)
		default:
		}
		if client == nil {
			cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dataDir, "admin.kubeconfig"))
			if err != nil {
				return err
			}
			if client, err = rest.HTTPClientFor(cfg); err != nil {
				return err
			}
		}
		resp, err := client.Get(api + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
	return api, client, dataDir
}

func apiDo(client *http.Client, method, url string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, body)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s %s", method, url, resp.Status, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// agent runs orca-agent's command with args in this process until the
// returned stop is called.
func agent(t *testing.T, args ...string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := newCommand()
	cmd.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("orca-agent: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("orca-agent did not stop")
		}
	}
	t.Cleanup(stop)
	return stop
}

// `orca-agent --hollow 3` against the real orca-server joins each node
// with the bootstrap token (its own CSR, certificate and NATS user, kept
// under <data-dir>/<node>/); the nodes are Ready with the capacity asked
// for; a restart without the token reuses the credentials and renews the
// Leases again.
func TestHollowCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: builds and runs orca-server")
	}
	api, client, serverDir := orcaServer(t)
	tok, err := bootstrap.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	sec, err := bootstrap.Secret(tok, bootstrap.TokenOptions{TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sec.APIVersion, sec.Kind = "v1", "Secret"
	if err := apiDo(client, http.MethodPost, api+"/api/v1/namespaces/"+bootstrap.SecretNamespace+"/secrets", sec, nil); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(serverDir, "tls", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(caPEM)
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
	hash := "sha256:" + hex.EncodeToString(sum[:])

	agentDir := t.TempDir()
	common := []string{"--hollow", "3", "--hollow-name-prefix", "cli-hollow-", "--hollow-capacity", "cpu=8,pods=50", "--data-dir", agentDir,
		"--heartbeat-interval", "300ms", "--log-level", "warn", "--node-labels", "test=hollow"}
	stop := agent(t, append(common, "--server", api, "--token", tok, "--discovery-token-ca-cert-hash", hash)...)
	waitNodes := func(since time.Time) {
		t.Helper()
		storetest.Eventually(t, 90*time.Second, func() error {
			var nl corev1.NodeList
			if err := apiDo(client, http.MethodGet, api+"/api/v1/nodes?labelSelector=test%3Dhollow", nil, &nl); err != nil {
				return err
			}
			ready := 0
			for _, n := range nl.Items {
				for _, c := range n.Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && n.Status.Capacity.Cpu().Value() == 8 && n.Status.Capacity.Pods().Value() == 50 {
						ready++
					}
				}
			}
			if ready != 3 {
				return fmt.Errorf("%d of 3 hollow nodes Ready with cpu 8, pods 50", ready)
			}
			var ll coordinationv1.LeaseList
			if err := apiDo(client, http.MethodGet, api+"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", nil, &ll); err != nil {
				return err
			}
			renewed := 0
			for _, l := range ll.Items {
				if l.Spec.RenewTime != nil && l.Spec.RenewTime.After(since) {
					renewed++
				}
			}
			if renewed != 3 {
				return fmt.Errorf("%d of 3 leases renewed since %v", renewed, since)
			}
			return nil
		})
	}
	waitNodes(time.Now())
	for i := range 3 {
		if _, err := os.Stat(filepath.Join(agentDir, fmt.Sprintf("cli-hollow-%d", i), "nats", "node.creds")); err != nil {
			t.Errorf("credentials of node %d: %v", i, err)
		}
	}
	stop()

	// Again, without the token: the credentials a join left are reused.
	restart := time.Now()
	agent(t, common...)
	waitNodes(restart)
}
