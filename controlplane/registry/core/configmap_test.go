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
