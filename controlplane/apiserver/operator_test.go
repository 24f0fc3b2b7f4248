package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// greetingCRD is the operator's CRD: a Greeting has spec.name and a
// status subresource where the operator writes its message.
const greetingCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: greetings.demo.orca.dev
spec:
  group: demo.orca.dev
  scope: Namespaced
  names: {plural: greetings, singular: greeting, kind: Greeting}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              name: {type: string}
          status:
            type: object
            properties:
              message: {type: string}
              observedGeneration: {type: integer}
`

var greetingGVK = schema.GroupVersionKind{Group: "demo.orca.dev", Version: "v1alpha1", Kind: "Greeting"}

// greeter is the operator's reconciler: it writes "hello, <spec.name>"
// to the Greeting's status subresource.
type greeter struct{ c client.Client }

func (g *greeter) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(greetingGVK)
	if err := g.c.Get(ctx, req.NamespacedName, u); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	name, _, _ := unstructured.NestedString(u.Object, "spec", "name")
	if err := unstructured.SetNestedField(u.Object, "hello, "+name, "status", "message"); err != nil {
		return ctrl.Result{}, err
	}
	if err := unstructured.SetNestedField(u.Object, u.GetGeneration(), "status", "observedGeneration"); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, g.c.Status().Update(ctx, u)
}

// TestControllerRuntimeOperator runs a small operator built with
// sigs.k8s.io/controller-runtime against orca: it applies its CRD, waits
// for it to be Established, and its reconciler (a manager with a cache of
// the custom resource kind, found through discovery) sees a Greeting
// created through the API and writes its status subresource, which the
// test reads back through the API; a spec change is seen too.
func TestControllerRuntimeOperator(t *testing.T) {
	e := newEnv(t)
	log.SetLogger(logr.Discard())
	cfg := e.sec.RESTConfig(e.url, nil)
	cfg.QPS, cfg.Burst = 100, 200
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The operator applies its CRD (server-side apply is another part's
	// work: create, or update if it exists).
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict([]byte(greetingCRD), crd); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create CRD: %v", err)
	}
	storetest.Eventually(t, 20*time.Second, func() error {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: crd.Name}, got); err != nil {
			return err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("CRD not established: %+v", got.Status.Conditions)
	})

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	watched := &unstructured.Unstructured{}
	watched.SetGroupVersionKind(greetingGVK)
	if err := ctrl.NewControllerManagedBy(mgr).Named("greeter").For(watched).
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}). // the test may run more than once per process
		Complete(&greeter{c: mgr.GetClient()}); err != nil {
		t.Fatal(err)
	}
	mgrCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	e.must(http.StatusCreated, http.MethodPost, "/apis/demo.orca.dev/v1alpha1/namespaces/default/greetings", "application/yaml",
		"apiVersion: demo.orca.dev/v1alpha1\nkind: Greeting\nmetadata: {name: world}\nspec: {name: world}\n", nil)
	waitMessage := func(want string, gen int64) {
		t.Helper()
		storetest.Eventually(t, 30*time.Second, func() error {
			var g struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
				Status   struct {
					Message            string `json:"message"`
					ObservedGeneration int64  `json:"observedGeneration"`
				} `json:"status"`
			}
			e.must(http.StatusOK, http.MethodGet, "/apis/demo.orca.dev/v1alpha1/namespaces/default/greetings/world", "", nil, &g)
			if g.Status.Message != want || g.Status.ObservedGeneration != gen || g.Metadata.Generation != gen {
				return fmt.Errorf("status %+v at generation %d, want %q at %d", g.Status, g.Metadata.Generation, want, gen)
			}
			return nil
		})
	}
	waitMessage("hello, world", 1)
	e.must(http.StatusOK, http.MethodPatch, "/apis/demo.orca.dev/v1alpha1/namespaces/default/greetings/world", "application/merge-patch+json",
		`{"spec":{"name":"orca"}}`, nil)
	waitMessage("hello, orca", 2)
}
