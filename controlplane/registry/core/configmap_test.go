package core

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
)

func TestConfigMap(t *testing.T) {
	cm := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cfg"}, Data: data}
	}
	registrytest.Run(t, ConfigMap(), []registrytest.Case{
		{Name: "valid keys", Obj: cm(map[string]string{"a.b-c_d": "x", "config.yaml": "y"})},
		{Name: "bad keys", Obj: cm(map[string]string{"a/b": "x", "..": "y"}), Errors: []string{"FieldValueInvalid:data[..]", "FieldValueInvalid:data[a/b]"}},
		{Name: "bad name", Obj: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "Cfg_1"}}, Errors: []string{"FieldValueInvalid:metadata.name"}},
		{Name: "data may change", Old: cm(map[string]string{"a": "1"}), Obj: cm(map[string]string{"a": "2"})},
	})
	registrytest.CheckTable(t, ConfigMap(), cm(nil))
}

// The tables show what kubectl shows for Kubernetes: DATA counts keys,
// a secret's TYPE, a pod's wide columns up to READINESS GATES.
func TestKubectlColumns(t *testing.T) {
	cmk, sk, pk := ConfigMap(), Secret(), Pod()
	c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Data: map[string]string{"a": "1"}, BinaryData: map[string][]byte{"b": nil}}
	if row := cmk.TableRow(c); row[1] != int64(2) {
		t.Errorf("configmap row %v, want DATA 2", row)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": nil, "tls.key": nil}}
	if row := sk.TableRow(s); row[1] != "kubernetes.io/tls" || row[2] != int64(2) {
		t.Errorf("secret row %v", row)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:   corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "a"}, {ConditionType: "b"}}},
		Status: corev1.PodStatus{NominatedNodeName: "n2", Conditions: []corev1.PodCondition{{Type: "a", Status: corev1.ConditionTrue}, {Type: "b", Status: corev1.ConditionFalse}}}}
	cols, row := pk.TableColumns(), pk.TableRow(p)
	if cols[len(cols)-2].Name != "Nominated Node" || row[len(row)-2] != "n2" || row[len(row)-1] != "1/2" {
		t.Errorf("pod wide columns %v row %v", cols, row)
	}
	if row := pk.TableRow(&corev1.Pod{}); row[len(row)-1] != "<none>" || row[len(row)-2] != "<none>" {
		t.Errorf("pod without gates: %v", row)
	}
}
