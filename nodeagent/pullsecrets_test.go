package nodeagent

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
	"github.com/orca-edge/orca/runtimes/imagestore"
)

// waitingReasons records, in order and without repeats, the waiting
// reasons of the first container of pod name as the store sees them.
func waitingReasons(t *testing.T, e *env, name string) func() []string {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := e.s.Watch(ctx, store.Pods, "default", 0)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Name != name {
				continue
			}
			if wt := cs0(p).State.Waiting; wt != nil {
				mu.Lock()
				if len(seen) == 0 || seen[len(seen)-1] != wt.Reason {
					seen = append(seen, wt.Reason)
				}
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// Pods pull from a registry that requires credentials, on a real
// containerd: with an imagePullSecret the pod runs and reports the
// image's digest; without, ErrImagePull then ImagePullBackOff; a missing
// secret is a warning event and the pull goes on with the others; Never
// with an absent image is ErrImageNeverPull.
func TestImagePullSecrets(t *testing.T) {
	ce := startContainerd(t)
	reg := containerdtest.StartRegistry(t, containerdtest.WithBasicAuth("robot", "s3cret"))
	ref, dgst, err := reg.PushFile(context.Background(), buildImages(t)[jobImage], "private/job:v1")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	e.agent("edge-p", func(c *Config) { c.BackoffBase, c.BackoffMax = 300*time.Millisecond, time.Second }, ce.runtime(t))
	ctx := context.Background()
	dockerconfig := fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, reg.Host, base64.StdEncoding.EncodeToString([]byte("robot:s3cret")))
	if _, err := e.s.Create(ctx, store.Secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: "default"},
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(dockerconfig)}}); err != nil {
		t.Fatal(err)
	}

	denied := waitingReasons(t, e, "denied")
	e.pod("edge-p", simplePod("denied", ref, corev1.RestartPolicyNever))
	e.waitPod("default", "denied", 30*time.Second, func(p *corev1.Pod) error {
		if w := cs0(p).State.Waiting; w == nil || w.Reason != "ImagePullBackOff" {
			return fmt.Errorf("state %+v, want waiting ImagePullBackOff", cs0(p).State)
		}
		return nil
	})
	// The watch may deliver the last state after waitPod read it.
	storetest.Eventually(t, 10*time.Second, func() error {
		if got := denied(); !errThenBackOff(got) {
			return fmt.Errorf("waiting reasons of the pod without a secret: %v, want ErrImagePull then ImagePullBackOff", got)
		}
		return nil
	})
	eventually(t, "denied", "Failed", "failed to pull image", e)

	p := simplePod("allowed", ref, corev1.RestartPolicyNever)
	p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "no-such-secret"}, {Name: "regcred"}}
	e.pod("edge-p", p)
	got := e.waitPod("default", "allowed", 60*time.Second, phaseIs(corev1.PodSucceeded))
	if want := reg.Host + "/private/job@" + dgst.String(); cs0(got).ImageID != want {
		t.Errorf("imageID %q, want %q", cs0(got).ImageID, want)
	}
	eventually(t, "allowed", "FailedToRetrieveImagePullSecret", "default/no-such-secret", e)

	never := simplePod("never", reg.Host+"/private/absent:v1", corev1.RestartPolicyNever)
	never.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	e.pod("edge-p", never)
	e.waitPod("default", "never", 30*time.Second, func(p *corev1.Pod) error {
		if w := cs0(p).State.Waiting; w == nil || w.Reason != "ErrImageNeverPull" || w.Message != `Container image "`+reg.Host+`/private/absent:v1" is not present with pull policy of Never` {
			return fmt.Errorf("state %+v, want waiting ErrImageNeverPull", cs0(p).State)
		}
		return nil
	})
}

// eventually waits for an Event about pod with reason whose message
// holds text.
func eventually(t *testing.T, pod, reason, text string, e *env) {
	t.Helper()
	storetest.Eventually(t, 10*time.Second, func() error {
		if _, evs := podEvents(e, pod); !hasEvent(evs, reason, text) {
			return fmt.Errorf("no %s event about %s saying %q: %v", reason, pod, text, evs)
		}
		return nil
	})
}

// errThenBackOff reports whether reasons has ErrImagePull followed by
// ImagePullBackOff.
func errThenBackOff(reasons []string) bool {
	for i := 0; i+1 < len(reasons); i++ {
		if reasons[i] == "ErrImagePull" && reasons[i+1] == "ImagePullBackOff" {
			return true
		}
	}
	return false
}

func hasEvent(evs []*corev1.Event, reason, text string) bool {
	for _, ev := range evs {
		if ev.Reason == reason && strings.Contains(ev.Message, text) {
			return true
		}
	}
	return false
}

// The kubelet's defaulting of imagePullPolicy, for pods written without it.
func TestPullPolicyDefault(t *testing.T) {
	for image, want := range map[string]corev1.PullPolicy{
		"nginx": corev1.PullAlways, "nginx:latest": corev1.PullAlways, "registry:5000/nginx": corev1.PullAlways,
		"nginx:1.27": corev1.PullIfNotPresent, "registry:5000/nginx:1.27": corev1.PullIfNotPresent,
		"nginx@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef": corev1.PullIfNotPresent,
	} {
		if got := pullPolicy(&corev1.Container{Image: image}); got != string(want) {
			t.Errorf("pullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
	if got := pullPolicy(&corev1.Container{Image: "nginx", ImagePullPolicy: corev1.PullNever}); got != "Never" {
		t.Errorf("an explicit policy is kept: %s", got)
	}
}

// Both secret formats; "auth" gives the username and password.
func TestSecretAuth(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *corev1.Secret
		want []runtimes.RegistryAuth
		err  bool
	}{
		{"dockerconfigjson", &corev1.Secret{Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(
			`{"auths":{"b.example.com":{"username":"u","password":"p"},"a.example.com":{"auth":"` + base64.StdEncoding.EncodeToString([]byte("x:y:z")) + `"},"c.example.com":{"identitytoken":"tok"}}}`)}},
			[]runtimes.RegistryAuth{{Server: "a.example.com", Username: "x", Password: "y:z"}, {Server: "b.example.com", Username: "u", Password: "p"}, {Server: "c.example.com", IdentityToken: "tok"}}, false},
		{"dockercfg", &corev1.Secret{Type: corev1.SecretTypeDockercfg, Data: map[string][]byte{corev1.DockerConfigKey: []byte(
			`{"https://index.docker.io/v1/":{"auth":"` + base64.StdEncoding.EncodeToString([]byte("me:pw")) + `","email":"me@example.com"}}`)}},
			[]runtimes.RegistryAuth{{Server: "https://index.docker.io/v1/", Username: "me", Password: "pw"}}, false},
		{"opaque", &corev1.Secret{Data: map[string][]byte{"token": []byte("x")}}, nil, true},
		{"bad json", &corev1.Secret{Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte("{")}}, nil, true},
		{"bad auth", &corev1.Secret{Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"a":{"auth":"!!"}}}`)}}, nil, true},
	} {
		got, err := secretAuth(tc.s)
		if (err != nil) != tc.err || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v, %v; want %v (error %v)", tc.name, got, err, tc.want, tc.err)
		}
	}
}

// An image pushed into the cluster's image store (as `orca image push`
// does) runs on a node that has never seen it, with no registry (none
// listens at the reference's 127.0.0.1:1): the runtime imports it from
// the NATS Object Store by digest.
func TestPodImageFromClusterStore(t *testing.T) {
	ce := startContainerd(t)
	e := newEnv(t)
	images, err := imagestore.New(context.Background(), e.s.JetStream())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(buildImages(t)[jobImage])
	if err != nil {
		t.Fatal(err)
	}
	img, err := images.Push(context.Background(), "127.0.0.1:1/offline/job:v1", f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	ce.cfg.ImageSource = images
	e.agent("edge-o", nil, ce.runtime(t))
	e.pod("edge-o", simplePod("offline", "127.0.0.1:1/offline/job:v1", corev1.RestartPolicyNever))
	got := e.waitPod("default", "offline", 60*time.Second, phaseIs(corev1.PodSucceeded))
	if want := "127.0.0.1:1/offline/job@" + img.Digest; cs0(got).ImageID != want {
		t.Errorf("imageID %q, want %q", cs0(got).ImageID, want)
	}
}
