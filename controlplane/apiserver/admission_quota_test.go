package apiserver

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func quotaPod(name string, res *corev1.ResourceRequirements) *corev1.Pod {
	c := corev1.Container{Name: "app", Image: "docker.io/library/hello-container:v1"}
	if res != nil {
		c.Resources = *res
	}
	return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
}

func rlist(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func (e *env) namespace(name string) {
	e.t.Helper()
	e.must(201, "POST", "/api/v1/namespaces", "application/json", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil)
}

func wantStatus(t *testing.T, code int, body []byte, want int, msg string) {
	t.Helper()
	if code != want || !strings.Contains(string(body), msg) {
		t.Fatalf("got %d %s\nwant %d with %q", code, body, want, msg)
	}
}

// TestKubectlQuota is issue 11's check with the real kubectl:
// examples/workloads/quota.yaml applied, two pods admitted (with the
// LimitRange's CPU defaults), the third refused with Kubernetes' message,
// and kubectl get quota showing pods: 2/2.
func TestKubectlQuota(t *testing.T) {
	if _, err := os.Stat(kubectlPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("kubectl missing under CI: %v", err)
		}
		t.Skip("kubectl not found")
	}
	e := newEnv(t)
	example, err := os.ReadFile("../../examples/workloads/quota.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := e.mustKubectl(string(example), "apply", "-f", "-")
	if !strings.Contains(out, "resourcequota/pod-demo created") || !strings.Contains(out, "limitrange/cpu-limit-range created") {
		t.Fatalf("apply: %s", out)
	}
	pod := func(name string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\nspec:\n  containers:\n  - name: app\n    image: docker.io/library/hello-container:v1\n"
	}
	for _, n := range []string{"pod-quota-demo-1", "pod-quota-demo-2"} {
		if out := e.mustKubectl(pod(n), "apply", "-f", "-"); !strings.Contains(out, "pod/"+n+" created") {
			t.Fatalf("apply %s: %s", n, out)
		}
	}
	out, err = e.kubectl(t.Context(), pod("pod-quota-demo-3"), "apply", "-f", "-")
	want := `Error from server (Forbidden): error when creating "STDIN": pods "pod-quota-demo-3" is forbidden: exceeded quota: pod-demo, requested: pods=1, used: pods=2, limited: pods=2`
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("third pod: %v\n%s\nwant %s", err, out, want)
	}
	out = e.mustKubectl("", "get", "quota")
	if !regexp.MustCompile(`(?m)^NAME\s+AGE\s+REQUEST\s+LIMIT\npod-demo\s+\S+\s+pods: 2/2\s*$`).MatchString(out) {
		t.Fatalf("get quota:\n%s", out)
	}
	if out := e.mustKubectl("", "get", "limits"); !regexp.MustCompile(`(?m)^NAME\s+CREATED AT\ncpu-limit-range\s+\d{4}-\d\d-\d\dT`).MatchString(out) {
		t.Fatalf("get limits:\n%s", out)
	}
	out = e.mustKubectl("", "get", "pod", "pod-quota-demo-1", "-o", `jsonpath={.spec.containers[0].resources.requests.cpu} {.spec.containers[0].resources.limits.cpu} {.metadata.annotations.kubernetes\.io/limit-ranger}`)
	if out != "500m 1 LimitRanger plugin set: cpu request for container app; cpu limit for container app" {
		t.Fatalf("defaults: %q", out)
	}
}

// TestLimitRangerAdmission: min, max and ratio refused with LimitRanger's
// messages, defaults (a max makes the default limit and request, as
// SetDefaults_LimitRangeItem) only where a container states nothing, claims
// checked against a PersistentVolumeClaim item.
func TestLimitRangerAdmission(t *testing.T) {
	e := newEnv(t)
	e.namespace("lr")
	e.must(201, "POST", "/api/v1/namespaces/lr/limitranges", "application/json", &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "cpu-min-max"},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{
			{Type: corev1.LimitTypeContainer, Max: rlist("cpu", "800m"), Min: rlist("cpu", "200m"), MaxLimitRequestRatio: rlist("cpu", "2")},
			{Type: corev1.LimitTypePersistentVolumeClaim, Max: rlist("storage", "2Gi"), Min: rlist("storage", "1Gi")},
		}}}, nil)
	code, body := e.do("POST", "/api/v1/namespaces/lr/pods", "application/json", quotaPod("big", &corev1.ResourceRequirements{Limits: rlist("cpu", "1"), Requests: rlist("cpu", "500m")}))
	wantStatus(t, code, body, http.StatusForbidden, `pods \"big\" is forbidden: maximum cpu usage per Container is 800m, but limit is 1`)
	code, body = e.do("POST", "/api/v1/namespaces/lr/pods", "application/json", quotaPod("small", &corev1.ResourceRequirements{Limits: rlist("cpu", "300m"), Requests: rlist("cpu", "100m")}))
	wantStatus(t, code, body, http.StatusForbidden, `[minimum cpu usage per Container is 200m, but request is 100m, cpu max limit to request ratio per Container is 2, but provided ratio is 3.000000]`)
	var p corev1.Pod
	e.must(201, "POST", "/api/v1/namespaces/lr/pods", "application/json", quotaPod("defaulted", nil), &p)
	if r, l := p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU], p.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU]; r.String() != "800m" || l.String() != "800m" {
		t.Fatalf("defaults: %v", p.Spec.Containers[0].Resources)
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "huge"}, Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources: corev1.VolumeResourceRequirements{Requests: rlist("storage", "5Gi")}}}
	code, body = e.do("POST", "/api/v1/namespaces/lr/persistentvolumeclaims", "application/json", pvc)
	wantStatus(t, code, body, http.StatusForbidden, `maximum storage usage per PersistentVolumeClaim is 2Gi, but request is 5Gi`)
}

// TestResourceQuotaAdmission: compute quotas need each container to state
// what they limit; object counts and compute over the quota are refused
// with Kubernetes' messages; scoped quotas see only their pods; status.used
// is charged.
func TestResourceQuotaAdmission(t *testing.T) {
	e := newEnv(t)
	e.namespace("rq")
	e.must(201, "POST", "/api/v1/namespaces/rq/resourcequotas", "application/json", &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "compute"},
		Spec: corev1.ResourceQuotaSpec{Hard: rlist("limits.cpu", "1", "requests.memory", "1Gi")}}, nil)
	e.must(201, "POST", "/api/v1/namespaces/rq/resourcequotas", "application/json", &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "objects"},
		Spec: corev1.ResourceQuotaSpec{Hard: rlist("configmaps", "1", "services.nodeports", "0", "count/secrets", "1")}}, nil)
	e.must(201, "POST", "/api/v1/namespaces/rq/resourcequotas", "application/json", &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "besteffort"},
		Spec: corev1.ResourceQuotaSpec{Hard: rlist("pods", "0"), Scopes: []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}}}, nil)

	code, body := e.do("POST", "/api/v1/namespaces/rq/pods", "application/json", quotaPod("nolimits", &corev1.ResourceRequirements{Requests: rlist("cpu", "100m")}))
	wantStatus(t, code, body, http.StatusForbidden, `pods \"nolimits\" is forbidden: failed quota: compute: must specify limits.cpu for: app; requests.memory for: app`)
	code, body = e.do("POST", "/api/v1/namespaces/rq/pods", "application/json", quotaPod("besteffort", nil))
	wantStatus(t, code, body, http.StatusForbidden, `exceeded quota: besteffort, requested: pods=1, used: pods=0, limited: pods=0`)
	ok := &corev1.ResourceRequirements{Limits: rlist("cpu", "700m"), Requests: rlist("memory", "512Mi")}
	e.must(201, "POST", "/api/v1/namespaces/rq/pods", "application/json", quotaPod("a", ok), nil)
	code, body = e.do("POST", "/api/v1/namespaces/rq/pods", "application/json", quotaPod("b", ok))
	wantStatus(t, code, body, http.StatusForbidden, `exceeded quota: compute, requested: limits.cpu=700m, used: limits.cpu=700m, limited: limits.cpu=1`)

	e.must(201, "POST", "/api/v1/namespaces/rq/configmaps", "application/json", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c1"}}, nil)
	code, body = e.do("POST", "/api/v1/namespaces/rq/configmaps", "application/json", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c2"}})
	wantStatus(t, code, body, http.StatusForbidden, `configmaps \"c2\" is forbidden: exceeded quota: objects, requested: configmaps=1, used: configmaps=1, limited: configmaps=1`)
	code, body = e.do("POST", "/api/v1/namespaces/rq/services", "application/json", &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "np"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}})
	wantStatus(t, code, body, http.StatusForbidden, `exceeded quota: objects, requested: services.nodeports=1, used: services.nodeports=0, limited: services.nodeports=0`)

	var q corev1.ResourceQuota
	e.must(200, "GET", "/api/v1/namespaces/rq/resourcequotas/compute", "", nil, &q)
	if u, m := q.Status.Used[corev1.ResourceLimitsCPU], q.Status.Used[corev1.ResourceRequestsMemory]; u.String() != "700m" || m.String() != "512Mi" {
		t.Fatalf("used %v", q.Status.Used)
	}
}

// TestQuotaConcurrentCreates: 20 pods created at once against pods=5:
// exactly 5 are admitted (the quota is charged with compare-and-swap),
// and status.used says 5.
func TestQuotaConcurrentCreates(t *testing.T) {
	e := newEnv(t)
	e.must(201, "POST", "/api/v1/namespaces/default/resourcequotas", "application/json", &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "five"},
		Spec: corev1.ResourceQuotaSpec{Hard: rlist("pods", "5")}}, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body := e.do("POST", "/api/v1/namespaces/default/pods", "application/json", quotaPod(fmt.Sprintf("p%d", i), nil))
			if code == http.StatusForbidden && !strings.Contains(string(body), "exceeded quota: five, requested: pods=1, used: pods=5, limited: pods=5") {
				t.Errorf("refusal: %s", body)
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[201] != 5 || codes[403] != 15 {
		t.Fatalf("codes %v, want 5 created and 15 refused", codes)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		var q corev1.ResourceQuota
		e.must(200, "GET", "/api/v1/namespaces/default/resourcequotas/five", "", nil, &q)
		var pods corev1.PodList
		e.must(200, "GET", "/api/v1/namespaces/default/pods", "", nil, &pods)
		if u := q.Status.Used[corev1.ResourcePods]; u.Value() != 5 || len(pods.Items) != 5 {
			return fmt.Errorf("used %v, %d pods", q.Status.Used, len(pods.Items))
		}
		return nil
	})
}
