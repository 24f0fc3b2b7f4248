package apiserver

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/orca-edge/orca/controlplane/store"
)

// The proxy subresources never dial an address Kubernetes'
// IsProxyableIP refuses (unspecified, link-local unicast and multicast):
// 400 "address not allowed", for an endpoint without a pod (a slice
// stored before validation refused such addresses) and for a pod's own
// address; nothing is dialled.
func TestProxyRefusesSpecialAddresses(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "meta", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	e.must(http.StatusCreated, "POST", "/api/v1/namespaces/default/services", "application/json", svc, nil)
	for i, ip := range []string{"169.254.169.254", "0.0.0.0", "224.0.0.1"} {
		sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "meta-x", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "meta"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(""), Port: ptr.To(int32(80))}}}
		// Straight to the store: the API refuses such a slice now.
		if i > 0 {
			if _, err := e.st.Delete(ctx, store.EndpointSlices, "default", "meta-x", ""); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.st.Create(ctx, store.EndpointSlices, sl); err != nil {
			t.Fatal(err)
		}
		code, b := e.do("GET", "/api/v1/namespaces/default/services/meta/proxy/latest/meta-data/", "", nil)
		var st metav1.Status
		_ = json.Unmarshal(b, &st)
		if code != http.StatusBadRequest || st.Message != "address not allowed" {
			t.Errorf("services/proxy to %s: %d %s, want 400 address not allowed", ip, code, b)
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ll", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: "far-away", Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	e.must(http.StatusCreated, "POST", "/api/v1/namespaces/default/pods", "application/json", pod, nil)
	var got corev1.Pod
	e.must(http.StatusOK, "GET", "/api/v1/namespaces/default/pods/ll", "", nil, &got)
	got.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "192.0.2.1", PodIP: "169.254.169.254", PodIPs: []corev1.PodIP{{IP: "169.254.169.254"}}}
	if _, err := e.st.Update(ctx, store.Pods, &got); err != nil {
		t.Fatal(err)
	}
	code, b := e.do("GET", "/api/v1/namespaces/default/pods/ll:80/proxy/", "", nil)
	if code != http.StatusBadRequest || !json.Valid(b) {
		t.Errorf("pods/proxy to 169.254.169.254: %d %s, want 400", code, b)
	}
}
