package storebench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// EtcdBinary is the etcd server StartEtcd runs (Debian's etcd-server
// package installs it as /usr/bin/etcd).
const EtcdBinary = "etcd"

// ErrNoEtcd is returned by StartEtcd when etcd is not installed.
var ErrNoEtcd = errors.New("storebench: etcd is not installed (apt-get install etcd-server)")

var configMaps = schema.GroupResource{Resource: "configmaps"}

// StartEtcd starts a single-member etcd with its data under dir, on
// random loopback ports, with its defaults (the WAL fsynced before each
// write is acknowledged), and returns a target on it through the v3 Go
// client. Close stops the client and the server. Returns ErrNoEtcd when
// the binary is missing.
func StartEtcd(ctx context.Context, dir string) (Target, error) {
	bin, err := exec.LookPath(EtcdBinary)
	if err != nil {
		return nil, ErrNoEtcd
	}
	clientPort, err := freePort()
	if err != nil {
		return nil, err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	client := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--name", "bench", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "bench="+peer, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logf.Close() }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		stop()
		return nil, err
	}
	// Wait until etcd serves (a member is elected leader at once).
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = cli.Get(cctx, "/health")
		cancel()
		if err == nil {
			break
		}
		select {
		case werr := <-exited:
			cli.Close()
			log, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
			return nil, fmt.Errorf("etcd exited: %v: %s", werr, strings.TrimSpace(string(log)))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			cli.Close()
			stop()
			return nil, fmt.Errorf("etcd at %s not ready: %w", client, err)
		}
		<-tick.C
	}
	return &etcdTarget{cli: cli, stop: stop, pid: cmd.Process.Pid, metrics: client + "/metrics"}, nil
}

// serverCPU reads the etcd process's user + system time from /proc.
func (e *etcdTarget) serverCPU() time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(e.pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name (which ends with ")"): utime is the
	// 14th field of the line, stime the 15th, in clock ticks (100/s).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// fsyncs reads etcd_disk_wal_fsync_duration_seconds_count from etcd's
// metrics.
func (e *etcdTarget) fsyncs() (uint64, bool) {
	resp, err := http.Get(e.metrics)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_disk_wal_fsync_duration_seconds_count "); ok {
			n, err := strconv.ParseFloat(v, 64)
			return uint64(n), err == nil
		}
	}
	return 0, false
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// etcdTarget stores ConfigMaps as the Kubernetes apiserver's etcd3 store
// does: key /registry/configmaps/<namespace>/<name>, create as a
// transaction on CreateRevision == 0, update on ModRevision == the read
// revision, resourceVersion = ModRevision.
type etcdTarget struct {
	cli     *clientv3.Client
	stop    func()
	pid     int
	metrics string // the /metrics URL
}

func (e *etcdTarget) Name() string { return "etcd" }

func etcdKey(namespace, name string) string {
	return "/registry/configmaps/" + namespace + "/" + name
}

func encodeCM(cm *corev1.ConfigMap) ([]byte, error) {
	rv := cm.ResourceVersion
	cm.ResourceVersion = ""
	defer func() { cm.ResourceVersion = rv }()
	cm.APIVersion, cm.Kind = "v1", "ConfigMap"
	return json.Marshal(cm)
}

func decodeCM(data []byte, rev int64) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	if err := json.Unmarshal(data, cm); err != nil {
		return nil, err
	}
	cm.ResourceVersion = strconv.FormatInt(rev, 10)
	return cm, nil
}

func (e *etcdTarget) Create(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	data, err := encodeCM(cm)
	if err != nil {
		return nil, err
	}
	key := etcdKey(cm.Namespace, cm.Name)
	resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(data))).Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, apierrors.NewAlreadyExists(configMaps, cm.Name)
	}
	return decodeCM(data, resp.Header.Revision)
}

func (e *etcdTarget) Get(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	resp, err := e.cli.Get(ctx, etcdKey(namespace, name))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, apierrors.NewNotFound(configMaps, name)
	}
	return decodeCM(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

func (e *etcdTarget) Update(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	rev, err := strconv.ParseInt(cm.ResourceVersion, 10, 64)
	if err != nil {
		return nil, apierrors.NewBadRequest("invalid resourceVersion " + cm.ResourceVersion)
	}
	data, err := encodeCM(cm)
	if err != nil {
		return nil, err
	}
	key := etcdKey(cm.Namespace, cm.Name)
	resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(data))).Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, apierrors.NewConflict(configMaps, cm.Name, fmt.Errorf("resourceVersion %d is stale", rev))
	}
	return decodeCM(data, resp.Header.Revision)
}

func (e *etcdTarget) List(ctx context.Context, namespace string) (int, error) {
	resp, err := e.cli.Get(ctx, etcdKey(namespace, ""), clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	for _, kv := range resp.Kvs {
		if _, err := decodeCM(kv.Value, kv.ModRevision); err != nil {
			return 0, err
		}
	}
	return len(resp.Kvs), nil
}

func (e *etcdTarget) Watch(ctx context.Context, namespace string, fn func(string)) error {
	// Established once etcd answers the watch's creation (WithCreatedNotify).
	wch := e.cli.Watch(clientv3.WithRequireLeader(ctx), etcdKey(namespace, ""), clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	select {
	case resp, ok := <-wch:
		if !ok || !resp.Created {
			return fmt.Errorf("etcd watch not created: %v", resp.Err())
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	go func() {
		for resp := range wch {
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				cm, err := decodeCM(ev.Kv.Value, ev.Kv.ModRevision)
				if err == nil {
					fn(cm.Name)
				}
			}
		}
	}()
	return nil
}

func (e *etcdTarget) Close() error {
	err := e.cli.Close()
	e.stop()
	return err
}
