package core

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Secret is the secrets kind: what Kubernetes does to a Secret on every
// write, in its v1 conversion (pkg/apis/core/v1/conversion.go), its
// registry (pkg/registry/core/secret/strategy.go) and its validation
// (pkg/apis/core/validation: ValidateSecret, ValidateSecretUpdate): type
// Opaque by default and kept when an update does not send it,
// stringData merged into data, selectable by type.
func Secret() registry.Kind {
	return registry.Kind{
		Resource: store.Secrets,
		Columns: []metav1.TableColumnDefinition{registry.NameColumn,
			registry.Column("Type", "string", "The type of the secret.", 0),
			registry.Column("Data", "string", "The number of keys.", 0),
			registry.AgeColumn},
		Row: func(obj store.Object) []any {
			x := obj.(*corev1.Secret)
			return []any{x.Name, string(x.Type), int64(len(x.Data)), registry.Age(obj)}
		},
		Default: func(obj store.Object) {
			if o := obj.(*corev1.Secret); o.Type == "" {
				o.Type = corev1.SecretTypeOpaque
			}
		},
		PrepareForCreate: func(obj store.Object) { mergeStringData(obj.(*corev1.Secret)) },
		PrepareForUpdate: func(obj, old store.Object) {
			s := obj.(*corev1.Secret)
			mergeStringData(s)
			if s.Type == "" {
				s.Type = old.(*corev1.Secret).Type
			}
		},
		Validate: func(obj store.Object) field.ErrorList { return validateSecret(obj.(*corev1.Secret)) },
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			return validateSecretUpdate(obj.(*corev1.Secret), old.(*corev1.Secret))
		},
		Fields: func(obj store.Object) fields.Set { return fields.Set{"type": string(obj.(*corev1.Secret).Type)} },
	}
}

// mergeStringData folds s.StringData into s.Data and clears it, as
// Kubernetes' Convert_v1_Secret_To_core_Secret: a stringData key wins over
// the same key in data. stringData is write-only, so it is never stored
// nor returned. PrepareForCreate and PrepareForUpdate call it, which puts
// it on every write path (POST, PUT, each PATCH type, dryRun) before
// validation.
func mergeStringData(s *corev1.Secret) {
	if len(s.StringData) > 0 && s.Data == nil {
		s.Data = make(map[string][]byte, len(s.StringData))
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
}

// validateSecret checks a Secret as Kubernetes' ValidateSecret (less its
// service-account-token rule, which wants a token controller orca does
// not run): each data key is a valid config key (IsConfigMapKey); the
// values total at most corev1.MaxSecretSize (1 MiB); and the type's
// required keys are present: .dockercfg or .dockerconfigjson holding a
// JSON object for the docker types, username or password for basic-auth,
// a non-empty ssh-privatekey for ssh-auth, tls.crt and tls.key for tls.
func validateSecret(s *corev1.Secret) field.ErrorList {
	var errs field.ErrorList
	dataPath := field.NewPath("data")
	total := 0
	for k, v := range s.Data {
		for _, msg := range validation.IsConfigMapKey(k) {
			errs = append(errs, field.Invalid(dataPath.Key(k), k, msg))
		}
		total += len(v)
	}
	if total > corev1.MaxSecretSize {
		errs = append(errs, field.TooLong(dataPath, "", corev1.MaxSecretSize))
	}
	requireJSON := func(key string) {
		b, ok := s.Data[key]
		if !ok {
			errs = append(errs, field.Required(dataPath.Key(key), ""))
			return
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			errs = append(errs, field.Invalid(dataPath.Key(key), "<secret contents redacted>", err.Error()))
		}
	}
	require := func(keys ...string) {
		for _, k := range keys {
			if _, ok := s.Data[k]; !ok {
				errs = append(errs, field.Required(dataPath.Key(k), ""))
			}
		}
	}
	switch s.Type {
	case corev1.SecretTypeDockercfg:
		requireJSON(corev1.DockerConfigKey)
	case corev1.SecretTypeDockerConfigJson:
		requireJSON(corev1.DockerConfigJsonKey)
	case corev1.SecretTypeBasicAuth:
		_, user := s.Data[corev1.BasicAuthUsernameKey]
		_, password := s.Data[corev1.BasicAuthPasswordKey]
		if !user && !password {
			require(corev1.BasicAuthUsernameKey, corev1.BasicAuthPasswordKey)
		}
	case corev1.SecretTypeSSHAuth:
		if len(s.Data[corev1.SSHAuthPrivateKey]) == 0 {
			errs = append(errs, field.Required(dataPath.Key(corev1.SSHAuthPrivateKey), ""))
		}
	case corev1.SecretTypeTLS:
		require(corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	return errs
}

// validateSecretUpdate checks the update-only rules of Kubernetes'
// ValidateSecretUpdate (validateSecret runs on updates too): type is
// immutable, and a Secret stored with immutable: true keeps it and keeps
// its data.
func validateSecretUpdate(s, old *corev1.Secret) field.ErrorList {
	errs := apivalidation.ValidateImmutableField(s.Type, old.Type, field.NewPath("type"))
	if old.Immutable != nil && *old.Immutable {
		if s.Immutable == nil || !*s.Immutable {
			errs = append(errs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
		}
		if !apiequality.Semantic.DeepEqual(s.Data, old.Data) {
			errs = append(errs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
		}
	}
	return errs
}
