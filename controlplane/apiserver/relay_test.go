package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/nats-io/nats.go"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// relayStatus decodes a relay reply's Status.
func relayStatus(t *testing.T, resp *nodeapi.RelayResponse) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(resp.Body, &st); err != nil || st.Kind != "Status" {
		t.Fatalf("reply %d %s: not a Status (%v)", resp.StatusCode, resp.Body, err)
	}
	return st
}

// The relay serves REST requests of a node over NATS with the apiserver's
// handler: reads and writes work, watches and malformed requests are
// refused with a Status, and bodies past max_payload fail in the client
// with 413.
func TestRelay(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.st.Create(ctx, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cfg", UID: "u1"},
		Data: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	// The Node authorizer lets edge.1 read what its pod references.
	cmVol := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}
	}
	if _, err := e.st.Create(ctx, store.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "u2"},
		Spec: corev1.PodSpec{NodeName: "edge.1", Volumes: []corev1.Volume{cmVol("cfg"), cmVol("missing")}, Containers: []corev1.Container{{Name: "c", Image: "i"}}}}); err != nil {
		t.Fatal(err)
	}
	r := nodeapi.NewRelay(e.nc, "edge.1")

	var resp *nodeapi.RelayResponse
	storetest.Eventually(t, 5*time.Second, func() error {
		var err error
		resp, err = r.Do(ctx, http.MethodGet, "/api/v1/namespaces/default/configmaps/cfg", "", nil)
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("GET configmap: %d %s", resp.StatusCode, resp.Body)
		}
		return err
	})
	var cm corev1.ConfigMap
	if json.Unmarshal(resp.Body, &cm) != nil || cm.Data["k"] != "v" {
		t.Fatalf("GET configmap: %d %s", resp.StatusCode, resp.Body)
	}

	resp, err := r.Do(ctx, http.MethodGet, "/api/v1/namespaces/default/configmaps/missing", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := relayStatus(t, resp); resp.StatusCode != 404 || st.Reason != metav1.StatusReasonNotFound {
		t.Fatalf("GET missing: %d %+v", resp.StatusCode, st)
	}

	ev := `{"apiVersion":"v1","kind":"Event","metadata":{"name":"e1","namespace":"default"},"involvedObject":{"kind":"ConfigMap","namespace":"default","name":"cfg"},"reason":"Test","message":"m","type":"Normal"}`
	resp, err = r.Do(ctx, http.MethodPost, "/api/v1/namespaces/default/events", "application/json", []byte(ev))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 201 {
		t.Fatalf("POST event: %d %s", resp.StatusCode, resp.Body)
	}

	for _, path := range []string{"/api/v1/namespaces/default/configmaps?watch=true", "/api/v1/namespaces/default/configmaps?watch=True",
		"/api/v1/namespaces/default/configmaps?watch=t", "/api/v1/watch/namespaces/default/configmaps", "/api/v1/namespaces/default/pods/web/log",
		"http://elsewhere/api/v1/pods", "relative"} {
		resp, err = r.Do(ctx, http.MethodGet, path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if st := relayStatus(t, resp); resp.StatusCode != 400 {
			t.Errorf("GET %s: %d %+v; want 400", path, resp.StatusCode, st)
		}
	}

	// A request whose reply subject is not below the node's inbox is
	// never answered: the server's connection may publish anywhere (a
	// node could have it write a KV key).
	for _, reply := range []string{"$KV.configmaps.default.pwn", nodeapi.NodeInboxPrefix("edge.2") + ".x", "_INBOX.x", nodeapi.NodeInboxPrefix("edge") + "_1x.y"} {
		sub, err := e.nc.SubscribeSync(reply)
		if err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(nodeapi.RelaySubject("edge.1"))
		msg.Reply = reply
		msg.Header.Set(nodeapi.RelayHeaderMethod, http.MethodGet)
		msg.Header.Set(nodeapi.RelayHeaderPath, "/api/v1/namespaces/default/configmaps/cfg")
		if err := e.nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
		// A request answered after the forged one proves the forged one
		// was handled (the queue is served in order) and not answered.
		if _, err := r.Do(ctx, http.MethodGet, "/api/v1/namespaces/default/configmaps/cfg", "", nil); err != nil {
			t.Fatal(err)
		}
		if m, err := sub.NextMsg(200 * time.Millisecond); err == nil {
			t.Errorf("a relay request with reply %q was answered there: %s", reply, m.Data)
		}
		sub.Unsubscribe()
	}

	big := make([]byte, e.nc.MaxPayload())
	_, err = r.Do(ctx, http.MethodPost, "/api/v1/namespaces/default/configmaps", "application/json", big)
	if !apierrors.IsRequestEntityTooLargeError(err) || !strings.Contains(err.Error(), "max_payload") {
		t.Fatalf("oversized body: %v; want 413 naming max_payload", err)
	}
}

// A relayed request carries the node's identity from its subject.
func TestRelayNodeUser(t *testing.T) {
	u := NodeUser("edge.1")
	if u.GetName() != "system:node:edge.1" || len(u.GetGroups()) != 2 || u.GetGroups()[0] != "system:nodes" || u.GetGroups()[1] != "system:authenticated" {
		t.Fatalf("NodeUser: %+v", u)
	}
	for subj, want := range map[string]string{nodeapi.RelaySubject("edge.1"): "edge.1", nodeapi.RelaySubject("a"): "a", "orca.apirelay.": "", "orca.other.a": ""} {
		got, ok := nodeapi.RelayNode(subj)
		if got != want || ok != (want != "") {
			t.Errorf("RelayNode(%q) = %q, %v; want %q", subj, got, ok, want)
		}
	}
	if nodeapi.RelaySubject("a.b") == nodeapi.RelaySubject("a")+".b" {
		t.Errorf("node a.b's subject %s is a subject under node a's", nodeapi.RelaySubject("a.b"))
	}
}

// The per-node bound counts each node apart and frees a slot on release.
func TestRelayLimiter(t *testing.T) {
	l := &relayLimiter{max: 2, n: map[string]int{}}
	if !l.acquire("a") || !l.acquire("a") {
		t.Fatal("a's first two requests refused")
	}
	if l.acquire("a") {
		t.Fatal("a's third request at once admitted; the bound is 2")
	}
	if !l.acquire("b") {
		t.Fatal("b refused while a is at its bound")
	}
	l.release("a")
	if !l.acquire("a") {
		t.Fatal("a refused after a release")
	}
	l.release("a")
	l.release("a")
	l.release("b")
	if len(l.n) != 0 {
		t.Fatalf("counts left after every release: %v", l.n)
	}
}

// NodeRestriction on token requests over the relay: a node gets a token
// bound to its own pod, not one bound to another node's pod nor an
// unbound one (the Node authorizer lets both nodes ask: each runs a pod
// of the ServiceAccount).
func TestRelayNodeTokenRequests(t *testing.T) {
	e := newEnv(t, withServiceAccountTokens())
	ctx := context.Background()
	for pod, node := range map[string]string{"web": "n1", "db": "n2"} {
		if _, err := e.st.Create(ctx, store.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: pod, UID: types.UID("uid-" + pod)},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "default", Containers: []corev1.Container{{Name: "c", Image: "i"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	token := func(node, pod string) *nodeapi.RelayResponse {
		t.Helper()
		body := `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}`
		if pod != "" {
			body = fmt.Sprintf(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"boundObjectRef":{"apiVersion":"v1","kind":"Pod","name":%q}}}`, pod)
		}
		resp, err := nodeapi.NewRelay(e.nc, node).Do(ctx, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts/default/token", "application/json", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if resp := token("n1", "web"); resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("n1's token for its pod: %d %s", resp.StatusCode, resp.Body)
		}
		return nil
	})
	for _, c := range []struct{ node, pod, want string }{
		{"n1", "db", "bound to a pod scheduled on a different node"},
		{"n1", "", "not bound to a pod"},
	} {
		resp := token(c.node, c.pod)
		if st := relayStatus(t, resp); resp.StatusCode != http.StatusForbidden || !strings.Contains(st.Message, c.want) {
			t.Errorf("node %s, token bound to %q: %d %s; want 403 %q", c.node, c.pod, resp.StatusCode, st.Message, c.want)
		}
	}
}
