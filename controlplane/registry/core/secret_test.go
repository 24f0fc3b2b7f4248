package core

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func TestValidateSecret(t *testing.T) {
	secret := func(typ corev1.SecretType, data map[string]string) *corev1.Secret {
		s := &corev1.Secret{Type: typ, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	tests := []struct {
		name   string
		secret *corev1.Secret
		want   []string // "type:field" of each error
	}{
		{"opaque", secret(corev1.SecretTypeOpaque, map[string]string{"a.b-c_d": "x"}), nil},
		{"bad key", secret(corev1.SecretTypeOpaque, map[string]string{"a/b": "x", "..": "y"}), []string{"FieldValueInvalid:data[..]", "FieldValueInvalid:data[a/b]"}},
		{"1 MiB", secret(corev1.SecretTypeOpaque, map[string]string{"a": strings.Repeat("x", corev1.MaxSecretSize)}), nil},
		{"over 1 MiB", secret(corev1.SecretTypeOpaque, map[string]string{"a": strings.Repeat("x", corev1.MaxSecretSize/2), "b": strings.Repeat("x", corev1.MaxSecretSize/2+1)}), []string{"FieldValueTooLong:data"}},
		{"dockerconfigjson", secret(corev1.SecretTypeDockerConfigJson, map[string]string{".dockerconfigjson": `{"auths":{}}`}), nil},
		{"dockerconfigjson missing", secret(corev1.SecretTypeDockerConfigJson, nil), []string{"FieldValueRequired:data[.dockerconfigjson]"}},
		{"dockerconfigjson not JSON", secret(corev1.SecretTypeDockerConfigJson, map[string]string{".dockerconfigjson": "{"}), []string{"FieldValueInvalid:data[.dockerconfigjson]"}},
		{"dockercfg not JSON", secret(corev1.SecretTypeDockercfg, map[string]string{".dockercfg": "[]"}), []string{"FieldValueInvalid:data[.dockercfg]"}},
		{"tls", secret(corev1.SecretTypeTLS, map[string]string{"tls.crt": "c", "tls.key": "k"}), nil},
		{"tls without key", secret(corev1.SecretTypeTLS, map[string]string{"tls.crt": "c"}), []string{"FieldValueRequired:data[tls.key]"}},
		{"basic-auth password only", secret(corev1.SecretTypeBasicAuth, map[string]string{"password": ""}), nil},
		{"basic-auth empty", secret(corev1.SecretTypeBasicAuth, nil), []string{"FieldValueRequired:data[password]", "FieldValueRequired:data[username]"}},
		{"ssh-auth empty key", secret(corev1.SecretTypeSSHAuth, map[string]string{"ssh-privatekey": ""}), []string{"FieldValueRequired:data[ssh-privatekey]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := errorKeys(validateSecret(tc.secret)); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestValidateSecretUpdate(t *testing.T) {
	immutable := func(typ corev1.SecretType, imm *bool, v string) *corev1.Secret {
		return &corev1.Secret{Type: typ, Immutable: imm, Data: map[string][]byte{"k": []byte(v)}}
	}
	yes, no := new(true), new(false)
	tests := []struct {
		name     string
		obj, old *corev1.Secret
		want     []string
	}{
		{"data change", immutable(corev1.SecretTypeOpaque, nil, "b"), immutable(corev1.SecretTypeOpaque, nil, "a"), nil},
		{"type change", immutable(corev1.SecretTypeTLS, nil, "a"), immutable(corev1.SecretTypeOpaque, nil, "a"), []string{"FieldValueInvalid:type"}},
		{"made immutable", immutable(corev1.SecretTypeOpaque, yes, "b"), immutable(corev1.SecretTypeOpaque, nil, "a"), nil},
		{"immutable, unchanged", immutable(corev1.SecretTypeOpaque, yes, "a"), immutable(corev1.SecretTypeOpaque, yes, "a"), nil},
		{"immutable, data changed", immutable(corev1.SecretTypeOpaque, yes, "b"), immutable(corev1.SecretTypeOpaque, yes, "a"), []string{"FieldValueForbidden:data"}},
		{"immutable unset", immutable(corev1.SecretTypeOpaque, no, "a"), immutable(corev1.SecretTypeOpaque, yes, "a"), []string{"FieldValueForbidden:immutable"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := errorKeys(validateSecretUpdate(tc.obj, tc.old)); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// errorKeys lists "type:field" of each error, sorted.
func errorKeys(errs field.ErrorList) []string {
	var keys []string
	for _, e := range errs {
		keys = append(keys, string(e.Type)+":"+e.Field)
	}
	slices.Sort(keys)
	return keys
}

func TestSecretKind(t *testing.T) {
	sec := func(typ corev1.SecretType, data, stringData map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s"}, Type: typ, StringData: stringData}
		for k, v := range data {
			if s.Data == nil {
				s.Data = map[string][]byte{}
			}
			s.Data[k] = []byte(v)
		}
		return s
	}
	registrytest.Run(t, Secret(), []registrytest.Case{
		{Name: "Opaque, stringData merged", Obj: sec("", map[string]string{"a": "1", "b": "1"}, map[string]string{"b": "2"}), Check: func(t *testing.T, out store.Object) {
			s := out.(*corev1.Secret)
			if s.Type != corev1.SecretTypeOpaque || string(s.Data["a"]) != "1" || string(s.Data["b"]) != "2" || s.StringData != nil {
				t.Errorf("secret %+v", s)
			}
		}},
		{Name: "tls needs keys", Obj: sec(corev1.SecretTypeTLS, nil, nil), Errors: []string{"FieldValueRequired:data[tls.crt]", "FieldValueRequired:data[tls.key]"}},
		{Name: "type kept when not sent", Old: sec(corev1.SecretTypeBasicAuth, map[string]string{"username": "u"}, nil), Obj: sec("", map[string]string{"username": "v"}, nil),
			Check: func(t *testing.T, out store.Object) {
				if s := out.(*corev1.Secret); s.Type != corev1.SecretTypeBasicAuth {
					t.Errorf("type %s", s.Type)
				}
			}},
		{Name: "type immutable", Old: sec("", nil, nil), Obj: sec(corev1.SecretTypeBasicAuth, map[string]string{"username": "u"}, nil), Errors: []string{"FieldValueInvalid:type"}},
	})
	registrytest.CheckTable(t, Secret(), sec("", nil, nil))
}
