package apiserver

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/orca-edge/orca/controlplane/registry/policy"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

const crdPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

func attackCRD(group, plural, scope string) string {
	return fmt.Sprintf(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"%s.%s"},
"spec":{"group":"%s","scope":"%s","names":{"plural":"%s","kind":"Thing","listKind":"ThingList","singular":"thing"},
"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}}}]}}`,
		plural, group, group, scope, plural)
}

func (e *env) waitEstablished(name string) apiextensionsv1.CustomResourceDefinition {
	e.t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	storetest.Eventually(e.t, 20*time.Second, func() error {
		e.must(http.StatusOK, http.MethodGet, crdPath+"/"+name, "", nil, &crd)
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established {
				if c.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
				if c.Reason == "InstallationFailure" {
					return nil
				}
			}
		}
		return fmt.Errorf("%s not established: %+v", name, crd.Status.Conditions)
	})
	return crd
}

// A CRD whose name is as long as a DNS subdomain may be must either be
// refused at create or serve its custom resources.
func TestAttackCRDLongName(t *testing.T) {
	e := newEnv(t)
	plural := "things"
	group := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "."
	group += strings.Repeat("d", 253-len(plural)-1-len(group)-4) + ".com"
	code, out := e.do(http.MethodPost, crdPath, "application/json", attackCRD(group, plural, "Namespaced"))
	t.Logf("create CRD (name %d chars): %d %s", len(plural)+1+len(group), code, out[:min(len(out), 200)])
	if code != http.StatusCreated {
		t.Fatalf("create CRD: %d %s", code, out)
	}
	crd := e.waitEstablished(plural + "." + group)
	t.Logf("conditions: %+v", crd.Status.Conditions)
	code, out = e.do(http.MethodPost, "/apis/"+group+"/v1/namespaces/default/things", "application/json",
		`{"apiVersion":"`+group+`/v1","kind":"Thing","metadata":{"name":"t1"}}`)
	if code != http.StatusCreated {
		t.Errorf("create CR: %d %s", code, out)
	}
	code, out = e.do(http.MethodGet, "/apis/"+group+"/v1/namespaces/default/things/t1", "", nil)
	if code != http.StatusOK {
		t.Errorf("get CR: %d %s", code, out)
	}
}

// Kubernetes' spec.scope is immutable: a namespaced CRD with stored
// custom resources turned cluster-scoped would strand them.
func TestAttackCRDScopeChange(t *testing.T) {
	e := newEnv(t)
	e.must(http.StatusCreated, http.MethodPost, crdPath, "application/json", attackCRD("scope.example.com", "things", "Namespaced"), nil)
	e.waitEstablished("things.scope.example.com")
	storetest.Eventually(t, 10*time.Second, func() error {
		code, out := e.do(http.MethodPost, "/apis/scope.example.com/v1/namespaces/default/things", "application/json",
			`{"apiVersion":"scope.example.com/v1","kind":"Thing","metadata":{"name":"t1"}}`)
		if code != 201 {
			return fmt.Errorf("%d %s", code, out)
		}
		return nil
	})
	code, out := e.do(http.MethodPatch, crdPath+"/things.scope.example.com", "application/merge-patch+json", `{"spec":{"scope":"Cluster"}}`)
	t.Logf("scope change: %d %s", code, out[:min(len(out), 300)])
	if code != http.StatusUnprocessableEntity {
		t.Errorf("scope change answered %d, want 422 (spec.scope is immutable)", code)
		storetest.Eventually(t, 10*time.Second, func() error {
			code, out := e.do(http.MethodGet, "/apis/scope.example.com/v1/things", "", nil)
			t.Logf("list cluster-scoped after change: %d %s", code, out[:min(len(out), 400)])
			code, out = e.do(http.MethodGet, "/apis/scope.example.com/v1/things/t1", "", nil)
			t.Logf("get t1 cluster-scoped: %d %s", code, out[:min(len(out), 400)])
			return nil
		})
	}
}

// Parallel evictions against one PDB never let more through than
// disruptionsAllowed.
func TestAttackParallelEvictions(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const pods, allowed = 8, 3
	for i := 0; i < pods; i++ {
		if _, err := e.st.Create(ctx, store.Pods, evictionPod(fmt.Sprintf("p%d", i), "Running", true)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.st.Create(ctx, policy.PodDisruptionBudgets, evictionPDB("web", policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1,
		DisruptionsAllowed: allowed, CurrentHealthy: pods, DesiredHealthy: pods - allowed, ExpectedPods: pods}, nil)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	codes := make([]int, pods)
	for i := 0; i < pods; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("p%d", i)
			codes[i], _ = e.do(http.MethodPost, "/api/v1/namespaces/default/pods/"+name+"/eviction", "application/json", evictionBody(name, nil))
		}()
	}
	wg.Wait()
	ok := 0
	for _, c := range codes {
		if c == 201 {
			ok++
		} else if c != 429 {
			t.Errorf("eviction answered %d", c)
		}
	}
	if ok != allowed {
		t.Errorf("%d evictions went through, want %d (codes %v)", ok, allowed, codes)
	}
}

func TestAttackEvictionBadInput(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		path, body string
	}{
		{"/api/v1/namespaces/nope/pods/x/eviction", `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"x"}}`},
		{"/api/v1/namespaces/default/pods/x/eviction", `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"x"}}`},
		{"/api/v1/namespaces/default/pods/x/eviction", `{`},
		{"/api/v1/namespaces/default/pods/x/eviction", `[]`},
		{"/api/v1/namespaces/default/pods/x/eviction", `null`},
		{"/api/v1/namespaces/default/pods/x/eviction", ``},
		{"/api/v1/namespaces/default/pods/x/eviction", `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"x"},"deleteOptions":{"gracePeriodSeconds":-5,"propagationPolicy":"Bogus"}}`},
		{"/api/v1/namespaces/default/pods/x/eviction", `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"x"},"deleteOptions":{"dryRun":["Nope"]}}`},
	} {
		code, out := e.do(http.MethodPost, tc.path, "application/json", tc.body)
		t.Logf("%s %q: %d %s", tc.path, tc.body, code, out)
		if code >= 500 || code < 400 {
			t.Errorf("%s %q: %d %s", tc.path, tc.body, code, out)
		}
	}
}

func TestAttackApplyMismatch(t *testing.T) {
	e := newEnv(t)
	apply := "application/apply-patch+yaml"
	for _, tc := range []struct {
		path, body string
		want       int
	}{
		{"/api/v1/namespaces/default/configmaps/a?fieldManager=m", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b"}}`, 400},
		{"/api/v1/namespaces/default/configmaps/a?fieldManager=m", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"a"}}`, 400},
		{"/api/v1/namespaces/default/configmaps/a?fieldManager=m", `{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"a"}}`, 400},
		{"/api/v1/namespaces/default/configmaps/a?fieldManager=m", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"other"}}`, 400},
		{"/api/v1/namespaces/missing/configmaps/a?fieldManager=m", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}`, 404},
		{"/api/v1/namespaces/default/configmaps/a", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}`, 422},
		{"/api/v1/namespaces/default/configmaps/a?fieldManager=m", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","managedFields":[{"manager":"x","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{"f:bogus":{"x":1}}}]}}`, 0},
		{"/api/v1/namespaces/default/configmaps/c?fieldManager=m", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","managedFields":[{"manager":"x","operation":"Bogus"}]}}`, 0},
		{"/api/v1/namespaces/default/configmaps/d?fieldManager=m", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d"},"data":{"k":1}}`, 0},
		{"/api/v1/namespaces/default/configmaps/e?fieldManager=m", `- a`, 400},
		{"/api/v1/namespaces/default/configmaps/f?fieldManager=m", `null`, 0},
	} {
		code, out := e.do(http.MethodPatch, tc.path, apply, tc.body)
		t.Logf("%s %s: %d %s", tc.path, tc.body, code, out[:min(len(out), 300)])
		if code >= 500 || (tc.want != 0 && code != tc.want) {
			t.Errorf("%s %s: %d want %d: %s", tc.path, tc.body, code, tc.want, out)
		}
	}
}

func TestAttackApplyRace(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	codes := make([]int, 20)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _ = e.do(http.MethodPatch, fmt.Sprintf("/api/v1/namespaces/default/configmaps/race?fieldManager=m%d", i%2), "application/apply-patch+yaml",
				fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"race"},"data":{"k":"v%d"}}`, i))
		}()
	}
	wg.Wait()
	for _, c := range codes {
		if c != 200 && c != 201 && c != 409 {
			t.Errorf("codes %v", codes)
			break
		}
	}
	t.Logf("codes %v", codes)
	code, out := e.do(http.MethodGet, "/api/v1/namespaces/default/configmaps/race", "", nil)
	t.Logf("%d %s", code, out)
}

func TestAttackContinueTokens(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 5; i++ {
		e.must(201, http.MethodPost, "/api/v1/namespaces/default/configmaps", "application/json", fmt.Sprintf(`{"metadata":{"name":"c%d"}}`, i), nil)
	}
	tok := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, c := range []string{"garbage!!", tok("{}"), tok(`{"v":"meta.k8s.io/v1","rv":99999999,"start":"x"}`),
		tok(`{"v":"meta.k8s.io/v1","rv":1,"start":"../../etc"}`), tok(`{"v":"meta.k8s.io/v1","rv":-1,"start":"\u0000"}`),
		tok(`{"v":"meta.k8s.io/v1","rv":-1,"start":"zzzz"}`), tok(`{"v":"meta.k8s.io/v1","rv":1e30,"start":"a"}`)} {
		start := time.Now()
		code, out := e.do(http.MethodGet, "/api/v1/namespaces/default/configmaps?limit=2&continue="+c, "", nil)
		t.Logf("%s: %d (%v) %s", c, code, time.Since(start), out[:min(len(out), 300)])
		if code >= 500 && code != 504 {
			t.Errorf("%s: %d", c, code)
		}
	}
}
