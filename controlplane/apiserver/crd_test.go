package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/orca-edge/orca/controlplane/registry/apiextensions"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// crontabCRD is Kubernetes' documentation example (a namespaced CronTab),
// with a default, an enum, a preserved subtree, status and scale
// subresources, printer columns and a selectable field; the README's
// example file, so what it shows is tested.
var crontabCRD = func() string {
	b, err := os.ReadFile("../../examples/crontab/crontab-crd.yaml")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

const crontab = `apiVersion: stable.example.com/v1
kind: CronTab
metadata: {name: %s}
spec: {cronSpec: "* * * * */5", image: my-cron-image, color: %s, extra: {any: [thing]}}
`

// TestKubectlCustomResources drives a CustomResourceDefinition end to end
// with the real kubectl: apply the CRD, see it Established in `get crd`,
// create, get (table, selectors), patch, scale, explain and watch custom
// resources, get a 422 with field paths for a schema violation and a 400
// for an unknown field, then delete the CRD and see its custom resources
// and its kind go.
func TestKubectlCustomResources(t *testing.T) {
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Skip("kubectl not found")
	}
	e := newEnv(t)

	out := e.mustKubectl(crontabCRD, "apply", "-f", "-")
	if !strings.Contains(out, "customresourcedefinition.apiextensions.k8s.io/crontabs.stable.example.com created") {
		t.Fatalf("apply crd: %s", out)
	}
	e.mustKubectl("", "wait", "--for=condition=Established", "crd/crontabs.stable.example.com", "--timeout=20s")
	out = e.mustKubectl("", "get", "crd")
	if !strings.Contains(out, "CREATED AT") || !strings.Contains(out, "crontabs.stable.example.com") {
		t.Errorf("get crd:\n%s", out)
	}
	out = e.mustKubectl("", "get", "crd", "crontabs.stable.example.com", "-o", `jsonpath={.status.acceptedNames.kind} {.metadata.finalizers} {range .status.conditions[*]}{.type}={.status} {end}`)
	if !strings.Contains(out, "CronTab") || !strings.Contains(out, "NamesAccepted=True") || !strings.Contains(out, "Established=True") {
		t.Errorf("crd status: %s", out)
	}

	// kubectl discovers the new kind (its cache is per test HOME) and
	// applies custom resources with its default (server-side) validation.
	out = e.mustKubectl(fmt.Sprintf(crontab, "c1", "red")+"---\n"+fmt.Sprintf(crontab, "c2", "blue"), "apply", "-f", "-")
	if !strings.Contains(out, "crontab.stable.example.com/c1 created") || !strings.Contains(out, "crontab.stable.example.com/c2 created") {
		t.Fatalf("apply crs: %s", out)
	}
	out = e.mustKubectl("", "get", "ct")
	t.Logf("get ct:\n%s", out)
	for _, want := range []string{"SPEC", "REPLICAS", "AGE", "c1", "* * * * */5", "c2"} {
		if !strings.Contains(out, want) {
			t.Errorf("get ct: no %q in\n%s", want, out)
		}
	}
	if out := e.mustKubectl("", "get", "crontab", "c1", "-o", "jsonpath={.spec.replicas} {.spec.extra.any[0]} {.metadata.generation}"); out != "1 thing 1" {
		t.Errorf("defaulted, preserved, generation: %q, want \"1 thing 1\"", out)
	}
	if out := e.mustKubectl("", "get", "crontabs", "--field-selector=spec.color=blue", "-o", "name"); out != "crontab.stable.example.com/c2\n" {
		t.Errorf("field selector spec.color=blue: %q", out)
	}
	e.mustKubectl("", "label", "crontab", "c1", "tier=batch")
	if out := e.mustKubectl("", "get", "crontabs", "-l", "tier=batch", "-o", "name"); out != "crontab.stable.example.com/c1\n" {
		t.Errorf("label selector: %q", out)
	}
	if out := e.mustKubectl("", "get", "all", "-o", "name"); !strings.Contains(out, "crontab.stable.example.com/c1") {
		t.Errorf("get all (category): %q", out)
	}

	// Patches: merge (kubectl's default for custom resources is rejected
	// as strategic: kubectl then needs --type=merge, as with Kubernetes).
	e.mustKubectl("", "patch", "crontab", "c1", "--type=merge", "-p", `{"spec":{"image":"v2"}}`)
	e.mustKubectl("", "patch", "crontab", "c1", "--type=json", "-p", `[{"op":"replace","path":"/spec/replicas","value":3}]`)
	if out := e.mustKubectl("", "get", "crontab", "c1", "-o", "jsonpath={.spec.image} {.spec.replicas} {.metadata.generation}"); out != "v2 3 3" {
		t.Errorf("after patches: %q, want \"v2 3 3\"", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := e.kubectl(ctx, "", "patch", "crontab", "c1", "-p", `{"spec":{"image":"v3"}}`); err == nil || !strings.Contains(out, "415") && !strings.Contains(out, "unknown format") {
		t.Errorf("strategic merge patch of a custom resource: %v %s", err, out)
	}

	// Server-side apply of a custom resource, with managedFields from
	// the CRD's schema.
	out = e.mustKubectl(fmt.Sprintf(crontab, "c4", "red"), "apply", "--server-side", "-f", "-")
	if !strings.Contains(out, "crontab.stable.example.com/c4 serverside-applied") {
		t.Errorf("apply --server-side: %s", out)
	}
	out = e.mustKubectl(strings.Replace(fmt.Sprintf(crontab, "c4", "red"), "my-cron-image", "other-image", 1), "apply", "--server-side", "-f", "-")
	if got := e.mustKubectl("", "get", "crontab", "c4", "-o", "jsonpath={.spec.image} {.metadata.managedFields[*].manager}"); !strings.Contains(got, "other-image kubectl") {
		t.Errorf("after a second server-side apply: %q (%s)", got, out)
	}
	e.mustKubectl("", "delete", "crontab", "c4")

	// The scale and status subresources.
	e.mustKubectl("", "scale", "crontab/c1", "--replicas=5")
	if out := e.mustKubectl("", "get", "crontab", "c1", "-o", "jsonpath={.spec.replicas}"); out != "5" {
		t.Errorf("after scale: %q", out)
	}
	e.mustKubectl("", "patch", "crontab", "c1", "--subresource=status", "--type=merge", "-p", `{"status":{"replicas":5}}`)
	e.mustKubectl("", "patch", "crontab", "c1", "--type=merge", "-p", `{"status":{"replicas":9}}`) // ignored: status is a subresource
	if out := e.mustKubectl("", "get", "crontab", "c1", "-o", "jsonpath={.status.replicas}"); out != "5" {
		t.Errorf("status.replicas: %q, want 5 (written through /status only)", out)
	}

	// Schema violations: 422 with the fields' paths; unknown fields: 400
	// under kubectl's default Strict validation.
	out, err := e.kubectl(ctx, strings.Replace(fmt.Sprintf(crontab, "bad", "green"), "image: my-cron-image", "image: my-cron-image, replicas: 20", 1), "apply", "-f", "-")
	t.Logf("apply of an invalid custom resource:\n%s", out)
	if err == nil || !strings.Contains(out, "Invalid") || !strings.Contains(out, "spec.color") || !strings.Contains(out, "spec.replicas") {
		t.Errorf("apply of an invalid custom resource: %v\n%s", err, out)
	}
	out, err = e.kubectl(ctx, strings.Replace(fmt.Sprintf(crontab, "bad", "red"), "image: my-cron-image", "image: my-cron-image, bogus: 1", 1), "create", "-f", "-")
	if err == nil || !strings.Contains(out, `unknown field "spec.bogus"`) {
		t.Errorf("create with an unknown field: %v\n%s", err, out)
	}

	// kubectl explain reads the schema from /openapi/v3.
	out = e.mustKubectl("", "explain", "crontab.spec")
	t.Logf("explain crontab.spec:\n%s", out)
	if !strings.Contains(out, "cronSpec") || !strings.Contains(out, "What to run and when") {
		t.Errorf("explain crontab.spec:\n%s", out)
	}
	out = e.mustKubectl("", "explain", "crontabs.spec.cronSpec")
	if !strings.Contains(out, "The schedule in cron format") {
		t.Errorf("explain crontabs.spec.cronSpec:\n%s", out)
	}

	// kubectl 1.27 and 1.28 validate client-side against /openapi/v2.
	for _, v := range []string{"1.27", "1.28"} {
		path := "/usr/lib/google-cloud-sdk/bin/kubectl." + v
		if _, err := os.Stat(path); err != nil {
			continue
		}
		name := "old-" + strings.ReplaceAll(v, ".", "-")
		out, err := e.kubectlAt(ctx, path, fmt.Sprintf(crontab, name, "red"), "apply", "-f", "-")
		if err != nil || !strings.Contains(out, name+" created") {
			t.Errorf("kubectl %s apply: %v\n%s", v, err, out)
		}
		out, err = e.kubectlAt(ctx, path, strings.Replace(fmt.Sprintf(crontab, name+"-bad", "red"), "image: my-cron-image", "image: my-cron-image, bogus: 1", 1), "apply", "-f", "-")
		if err == nil || !strings.Contains(out, "bogus") {
			t.Errorf("kubectl %s apply with an unknown field: %v\n%s", v, err, out)
		}
		if out, err := e.kubectlAt(ctx, path, "", "explain", "crontab.spec.cronSpec"); err != nil || !strings.Contains(out, "The schedule in cron format") {
			t.Errorf("kubectl %s explain: %v\n%s", v, err, out)
		}
		e.mustKubectl("", "delete", "crontab", name)
	}

	// get -w sees a custom resource created while it watches.
	buf := e.kubectlBackground(ctx, "get", "crontabs", "-w", "--request-timeout=50s")
	storetest.Eventually(t, 20*time.Second, func() error {
		if !strings.Contains(buf.String(), "c2") {
			return fmt.Errorf("get -w printed %q", buf.String())
		}
		return nil
	})
	e.mustKubectl(fmt.Sprintf(crontab, "c3", "red"), "create", "-f", "-")
	storetest.Eventually(t, 20*time.Second, func() error {
		if !strings.Contains(buf.String(), "c3") {
			return fmt.Errorf("get -w printed %q", buf.String())
		}
		return nil
	})

	// Deleting the CRD deletes its custom resources, then the CRD and the
	// kind go from discovery.
	e.mustKubectl("", "delete", "crd", "crontabs.stable.example.com", "--timeout=30s")
	storetest.Eventually(t, 20*time.Second, func() error {
		out, _ := e.kubectl(ctx, "", "api-resources", "--api-group=stable.example.com")
		if strings.Contains(out, "crontabs") {
			return fmt.Errorf("api-resources still lists crontabs:\n%s", out)
		}
		return nil
	})
	if out, err := e.kubectl(ctx, "", "get", "crontabs"); err == nil {
		t.Errorf("get crontabs after the CRD was deleted: %s", out)
	}
	if objs, _, err := e.st.List(ctx, crontabResource(), ""); err != nil || len(objs) != 0 {
		t.Errorf("custom resources left in their bucket: %d (%v)", len(objs), err)
	}
}

// crontabResource is the storage of crontabCRD's custom resources.
func crontabResource() store.Resource {
	return store.Resource{Group: "stable.example.com", Version: "v1", Kind: "CronTab", ListKind: "CronTabList", Plural: "crontabs", Namespaced: true,
		BucketName: apiextensions.BucketName("stable.example.com", "crontabs"),
		New:        func() store.Object { return &unstructured.Unstructured{} },
		NewList:    func() runtime.Object { return &unstructured.UnstructuredList{} }}
}

// widgetCRD serves two versions with None conversion (v1 stored,
// v1beta1 served too), cluster-scoped.
const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.demo.example.com}
spec:
  group: demo.example.com
  scope: Cluster
  names: {plural: widgets, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, x-kubernetes-preserve-unknown-fields: true}}}}
  - name: v1beta1
    served: true
    storage: false
    schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, x-kubernetes-preserve-unknown-fields: true}}}}
`

// TestCustomResourceDefinitionLifecycle checks, through the API, what the
// kubectl test does not: a cluster-scoped CRD with two versions served
// with None conversion (each lists the objects with its own apiVersion),
// a name conflict (NamesAccepted False), and deletion with a custom
// resource holding a finalizer (Terminating; creates refused with 405;
// the CRD goes once the finalizer is removed).
func TestCustomResourceDefinitionLifecycle(t *testing.T) {
	e := newEnv(t)
	e.must(http.StatusCreated, http.MethodPost, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/yaml", widgetCRD, nil)
	waitCondition := func(name, cond, status string) {
		t.Helper()
		storetest.Eventually(t, 20*time.Second, func() error {
			var crd apiextensionsv1.CustomResourceDefinition
			e.must(http.StatusOK, http.MethodGet, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+name, "", nil, &crd)
			for _, c := range crd.Status.Conditions {
				if string(c.Type) == cond && string(c.Status) == status {
					return nil
				}
			}
			return fmt.Errorf("%s: conditions %+v, want %s=%s", name, crd.Status.Conditions, cond, status)
		})
	}
	waitCondition("widgets.demo.example.com", "Established", "True")
	storetest.Eventually(t, 10*time.Second, func() error {
		if code, out := e.do(http.MethodGet, "/apis/demo.example.com/v1beta1/widgets", "", nil); code != http.StatusOK {
			return fmt.Errorf("list v1beta1: %d %s", code, out)
		}
		return nil
	})

	// Written through v1beta1, read through both versions.
	e.must(http.StatusCreated, http.MethodPost, "/apis/demo.example.com/v1beta1/widgets", "application/json",
		`{"apiVersion":"demo.example.com/v1beta1","kind":"Widget","metadata":{"name":"w1","finalizers":["demo.example.com/hold"]},"spec":{"size":3}}`, nil)
	for _, v := range []string{"v1", "v1beta1"} {
		var l unstructured.UnstructuredList
		code, out := e.do(http.MethodGet, "/apis/demo.example.com/"+v+"/widgets", "", nil)
		if code != http.StatusOK {
			t.Fatalf("list %s: %d %s", v, code, out)
		}
		if err := l.UnmarshalJSON(out); err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 1 || l.Items[0].GetAPIVersion() != "demo.example.com/"+v || l.Items[0].GetNamespace() != "" {
			t.Errorf("list %s: %s", v, out)
		}
		var u unstructured.Unstructured
		_, out = e.do(http.MethodGet, "/apis/demo.example.com/"+v+"/widgets/w1", "", nil)
		if err := u.UnmarshalJSON(out); err != nil || u.GetAPIVersion() != "demo.example.com/"+v {
			t.Errorf("get %s: %v %s", v, err, out)
		}
	}

	// A second CRD of the group asking for the same kind is not accepted.
	conflict := strings.NewReplacer("widgets.demo", "gadgets.demo", "plural: widgets", "plural: gadgets").Replace(widgetCRD)
	e.must(http.StatusCreated, http.MethodPost, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/yaml", conflict, nil)
	waitCondition("gadgets.demo.example.com", "NamesAccepted", "False")
	waitCondition("gadgets.demo.example.com", "Established", "False")
	if code, _ := e.do(http.MethodGet, "/apis/demo.example.com/v1/gadgets", "", nil); code != http.StatusNotFound {
		t.Errorf("gadgets served although its kind conflicts: %d", code)
	}

	// Deletion waits for the custom resource's finalizer.
	e.must(http.StatusOK, http.MethodDelete, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.demo.example.com", "", nil, nil)
	waitCondition("widgets.demo.example.com", "Terminating", "True")
	storetest.Eventually(t, 20*time.Second, func() error {
		var u unstructured.Unstructured
		_, out := e.do(http.MethodGet, "/apis/demo.example.com/v1/widgets/w1", "", nil)
		if err := u.UnmarshalJSON(out); err != nil || u.GetDeletionTimestamp() == nil {
			return fmt.Errorf("w1 not marked for deletion: %v %s", err, out)
		}
		code, out := e.do(http.MethodPost, "/apis/demo.example.com/v1/widgets", "application/json",
			`{"apiVersion":"demo.example.com/v1","kind":"Widget","metadata":{"name":"w2"}}`)
		if code != http.StatusMethodNotAllowed {
			return fmt.Errorf("create while terminating: %d %s, want 405", code, out)
		}
		return nil
	})
	e.must(http.StatusOK, http.MethodPatch, "/apis/demo.example.com/v1/widgets/w1", "application/merge-patch+json", `{"metadata":{"finalizers":null}}`, nil)
	storetest.Eventually(t, 20*time.Second, func() error {
		if code, out := e.do(http.MethodGet, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.demo.example.com", "", nil); code != http.StatusNotFound {
			return fmt.Errorf("CRD still there: %d %s", code, out)
		}
		if code, _ := e.do(http.MethodGet, "/apis/demo.example.com/v1/widgets", "", nil); code != http.StatusNotFound {
			return fmt.Errorf("widgets still served: %d", code)
		}
		return nil
	})
	// The conflict is gone with it: gadgets gets its names.
	waitCondition("gadgets.demo.example.com", "Established", "True")
}
