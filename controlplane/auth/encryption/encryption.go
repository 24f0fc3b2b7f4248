// Package encryption reads Kubernetes' EncryptionConfiguration
// (apiserver.config.k8s.io/v1, the file of kube-apiserver's
// --encryption-provider-config) and turns it into the value transformers
// the store applies to objects at rest (store.Config.Transformers).
//
// Providers, as Kubernetes writes them (so a value encrypted by one reads
// in the other's format):
//
//   - aesgcm: AES-GCM with a random 12-byte nonce per write, keys of 16, 24
//     or 32 bytes (base64 in the file); values "k8s:enc:aesgcm:v1:<key>:"
//   - nonce + ciphertext + tag. As Kubernetes documents, rotate a key
//     before about 200,000 writes with it (random nonces).
//   - aescbc: AES-CBC with PKCS#7 padding, same key sizes; prefix
//     "k8s:enc:aescbc:v1:<key>:". Kubernetes discourages it (padding
//     oracle); kept for configurations moved from Kubernetes.
//   - secretbox: XSalsa20-Poly1305, 32-byte keys; "k8s:enc:secretbox:v1:<key>:".
//   - identity: no encryption (plain JSON).
//   - kms (v1 and v2) is refused with an error: orca has no KMS plugin
//     client.
//
// Rules, ported from k8s.io/apiserver/pkg/server/options/encryptionconfig:
// within a resource list the first provider, and within a provider its
// first key, encrypts every write; every provider and key decrypts (a
// value is matched by its prefix, identity matches anything), and a value
// read with anything but the first is stale, so the store rewrites it on
// the next update even when the object did not change. Resources are
// "secrets", "<resource>.<group>", "*.<group>", "*." (the core group) and
// "*.*" (everything, custom resources included); a resource matches its
// exact entry first, then its group's wildcard, then "*.*", and a wildcard
// may not mask a later exact entry. Validation is Kubernetes'
// (validation_encryption.go) minus the KMS rules.
package encryption

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/apiserver/pkg/storage/value"
	aestransformer "k8s.io/apiserver/pkg/storage/value/encrypt/aes"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	"k8s.io/apiserver/pkg/storage/value/encrypt/secretbox"
	"sigs.k8s.io/yaml"
)

// The prefixes of stored values, as Kubernetes' encryptionconfig.
const (
	AESGCMPrefix    = "k8s:enc:aesgcm:v1:"
	AESCBCPrefix    = "k8s:enc:aescbc:v1:"
	SecretboxPrefix = "k8s:enc:secretbox:v1:"
)

// The apiVersion and kind a configuration file must carry.
const (
	APIVersion = "apiserver.config.k8s.io/v1"
	Kind       = "EncryptionConfiguration"
)

// Config is a loaded EncryptionConfiguration: the value transformer of
// each configured resource. It is immutable.
type Config struct {
	transformers map[schema.GroupResource]value.Transformer
	// Hash is the SHA-256 of the file's bytes, hex ("" for Parse of nil).
	Hash string
}

// ValueTransformer returns the transformer of gr: its exact entry,
// else its group's "*.<group>", else "*.*"; nil when none matches (the
// store keeps the values of gr as they are).
func (c *Config) ValueTransformer(gr schema.GroupResource) value.Transformer {
	if c == nil {
		return nil
	}
	if t := c.transformers[gr]; t != nil {
		return t
	}
	if t := c.transformers[schema.GroupResource{Group: gr.Group, Resource: "*"}]; t != nil {
		return t
	}
	return c.transformers[anyGroupAnyResource]
}

// Encrypts reports whether writes of gr are encrypted: its first provider
// is not identity.
func (c *Config) Encrypts(gr schema.GroupResource) bool {
	t := c.ValueTransformer(gr)
	if t == nil {
		return false
	}
	out, err := t.TransformToStorage(context.Background(), []byte("{}"), value.DefaultContext("probe"))
	return err == nil && !bytes.Equal(out, []byte("{}"))
}

var anyGroupAnyResource = schema.GroupResource{Group: "*", Resource: "*"}

// LoadFile reads and parses the EncryptionConfiguration at path. Errors
// name the file; they never contain key material.
func LoadFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("encryption provider configuration: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("encryption provider configuration %s: %w", path, err)
	}
	return c, nil
}

// Parse parses and validates an EncryptionConfiguration in YAML or JSON.
// Unknown fields are an error (a misspelt "providers" must not silently
// mean "no encryption").
func Parse(data []byte) (*Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("the file is empty")
	}
	var cfg apiserverv1.EncryptionConfiguration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if cfg.APIVersion != APIVersion || cfg.Kind != Kind {
		return nil, fmt.Errorf("apiVersion %q kind %q: want apiVersion %s, kind %s", cfg.APIVersion, cfg.Kind, APIVersion, Kind)
	}
	if errs := Validate(&cfg); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	sum := sha256.Sum256(data)
	c := &Config{transformers: map[schema.GroupResource]value.Transformer{}, Hash: hex.EncodeToString(sum[:])}
	lists := map[schema.GroupResource][]value.PrefixTransformer{}
	for _, rc := range cfg.Resources {
		pts, err := prefixTransformers(rc)
		if err != nil {
			return nil, err
		}
		for _, res := range rc.Resources {
			gr := schema.ParseGroupResource(res)
			if _, masked := lists[schema.GroupResource{Group: gr.Group, Resource: "*"}]; masked {
				return nil, fmt.Errorf("resource %q is masked by earlier rule %q", res, "*."+gr.Group)
			}
			if _, masked := lists[anyGroupAnyResource]; masked {
				return nil, fmt.Errorf("resource %q is masked by earlier rule %q", res, "*.*")
			}
			lists[gr] = append(lists[gr], pts...)
		}
	}
	for gr, l := range lists {
		c.transformers[gr] = value.NewPrefixTransformers(errors.New("no matching prefix found"), l...)
	}
	return c, nil
}

// prefixTransformers builds the providers of one resource list, in order.
func prefixTransformers(rc apiserverv1.ResourceConfiguration) ([]value.PrefixTransformer, error) {
	var out []value.PrefixTransformer
	for _, p := range rc.Providers {
		switch {
		case p.AESGCM != nil:
			t, err := keyed(p.AESGCM.Keys, AESGCMPrefix, func(key []byte) (value.Transformer, error) {
				block, err := aes.NewCipher(key)
				if err != nil {
					return nil, err
				}
				return aestransformer.NewGCMTransformer(block)
			})
			if err != nil {
				return nil, err
			}
			out = append(out, t)
		case p.AESCBC != nil:
			t, err := keyed(p.AESCBC.Keys, AESCBCPrefix, func(key []byte) (value.Transformer, error) {
				block, err := aes.NewCipher(key)
				if err != nil {
					return nil, err
				}
				return aestransformer.NewCBCTransformer(block), nil
			})
			if err != nil {
				return nil, err
			}
			out = append(out, t)
		case p.Secretbox != nil:
			t, err := keyed(p.Secretbox.Keys, SecretboxPrefix, func(key []byte) (value.Transformer, error) {
				return secretbox.NewSecretboxTransformer([32]byte(key)), nil
			})
			if err != nil {
				return nil, err
			}
			out = append(out, t)
		case p.Identity != nil:
			// Matches every value; refuses (so the next provider is tried)
			// one that carries an encryption prefix.
			out = append(out, value.PrefixTransformer{Transformer: identity.NewEncryptCheckTransformer(), Prefix: []byte{}})
		case p.KMS != nil:
			return nil, fmt.Errorf("kms provider %q: orca does not support KMS plugins; use aesgcm or secretbox", p.KMS.Name)
		}
	}
	return out, nil
}

// keyed builds one provider with prefix over its keys, each under
// "<name>:", the first one writing.
func keyed(keys []apiserverv1.Key, prefix string, newT func(key []byte) (value.Transformer, error)) (value.PrefixTransformer, error) {
	var per []value.PrefixTransformer
	for _, k := range keys {
		secret, err := base64.StdEncoding.DecodeString(k.Secret)
		if err != nil {
			return value.PrefixTransformer{}, fmt.Errorf("key %s: secrets must be base64 encoded", k.Name)
		}
		t, err := newT(secret)
		if err != nil {
			return value.PrefixTransformer{}, fmt.Errorf("key %s: %w", k.Name, err)
		}
		per = append(per, value.PrefixTransformer{Transformer: t, Prefix: []byte(k.Name + ":")})
	}
	provider := strings.TrimSuffix(strings.TrimPrefix(prefix, "k8s:enc:"), ":v1:")
	return value.PrefixTransformer{
		Transformer: value.NewPrefixTransformers(fmt.Errorf("no matching key was found for the provided %s transformer", provider), per...),
		Prefix:      []byte(prefix),
	}, nil
}

// Validate checks cfg with the rules of Kubernetes'
// ValidateEncryptionConfiguration (apis/apiserver/validation), its
// messages included; key secrets never appear in the errors.
func Validate(cfg *apiserverv1.EncryptionConfiguration) field.ErrorList {
	root := field.NewPath("resources")
	var errs field.ErrorList
	if len(cfg.Resources) == 0 {
		return append(errs, field.Required(root, "at least one resources is required"))
	}
	for i, rc := range cfg.Resources {
		r := root.Index(i).Child("resources")
		p := root.Index(i).Child("providers")
		if len(rc.Resources) == 0 {
			errs = append(errs, field.Required(r, fmt.Sprintf("at least one %s is required", r)))
		}
		errs = append(errs, validateResourceOverlap(rc.Resources, r)...)
		errs = append(errs, validateResourceNames(rc.Resources, r)...)
		if len(rc.Providers) == 0 {
			errs = append(errs, field.Required(p, fmt.Sprintf("at least one %s is required", p)))
		}
		for j, prov := range rc.Providers {
			path := p.Index(j)
			n := 0
			for _, set := range []bool{prov.AESGCM != nil, prov.AESCBC != nil, prov.Secretbox != nil, prov.Identity != nil, prov.KMS != nil} {
				if set {
					n++
				}
			}
			switch {
			case n == 0:
				errs = append(errs, field.Invalid(path, "", "provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity"))
				continue
			case n > 1:
				errs = append(errs, field.Invalid(path, "", "more than one provider specified in a single element, should split into different list elements"))
				continue
			}
			switch {
			case prov.AESGCM != nil:
				errs = append(errs, validateKeys(prov.AESGCM.Keys, path.Child("aesgcm", "keys"), []int{16, 24, 32})...)
			case prov.AESCBC != nil:
				errs = append(errs, validateKeys(prov.AESCBC.Keys, path.Child("aescbc", "keys"), []int{16, 24, 32})...)
			case prov.Secretbox != nil:
				errs = append(errs, validateKeys(prov.Secretbox.Keys, path.Child("secretbox", "keys"), []int{32})...)
			}
		}
	}
	return errs
}

func validateKeys(keys []apiserverv1.Key, path *field.Path, sizes []int) field.ErrorList {
	var errs field.ErrorList
	if len(keys) == 0 {
		return append(errs, field.Required(path, "at least one keys is required"))
	}
	names := map[string]bool{}
	for i, k := range keys {
		kp := path.Index(i)
		if k.Name == "" {
			errs = append(errs, field.Required(kp.Child("name"), "name is a mandatory field for a key"))
		} else if strings.Contains(k.Name, ":") {
			// The name ends at the first ':' of the stored prefix.
			errs = append(errs, field.Invalid(kp.Child("name"), k.Name, "must not contain ':'"))
		} else if names[k.Name] {
			errs = append(errs, field.Duplicate(kp.Child("name"), k.Name))
		}
		names[k.Name] = true
		if k.Secret == "" {
			errs = append(errs, field.Required(kp.Child("secret"), "secret is a mandatory field for a key"))
			continue
		}
		secret, err := base64.StdEncoding.DecodeString(k.Secret)
		if err != nil {
			errs = append(errs, field.Invalid(kp.Child("secret"), "REDACTED", "secrets must be base64 encoded"))
			continue
		}
		if !slices.Contains(sizes, len(secret)) {
			errs = append(errs, field.Invalid(kp.Child("secret"), "REDACTED", fmt.Sprintf("secret is not of the expected length, got %d, expected one of %v", len(secret), sizes)))
		}
	}
	return errs
}

func validateResourceOverlap(resources []string, path *field.Path) field.ErrorList {
	if len(resources) < 2 {
		return nil
	}
	grs := make([]schema.GroupResource, len(resources))
	for i, r := range resources {
		grs[i] = schema.ParseGroupResource(r)
	}
	var overlap, duplicate bool
	for i, a := range grs {
		for j, b := range grs {
			if i == j {
				continue
			}
			switch {
			case a == b:
				duplicate = true
			case a == anyGroupAnyResource:
				overlap = true
			case a.Group == b.Group && (a.Resource == "*" || b.Resource == "*"):
				overlap = true
			}
		}
	}
	var errs field.ErrorList
	if duplicate {
		errs = append(errs, field.Invalid(path, resources, "the same resource cannot be specified multiple times"))
	}
	if overlap {
		errs = append(errs, field.Invalid(path, resources, "using overlapping resources such as 'secrets' and '*.' in the same resource list is not allowed as they will be masked"))
	}
	return errs
}

func validateResourceNames(resources []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for j, res := range resources {
		p := path.Index(j)
		gr := schema.ParseGroupResource(res)
		switch {
		case strings.ToLower(res) != res:
			errs = append(errs, field.Invalid(p, res, "resource name should not contain capital letters"))
		case res == "*":
			errs = append(errs, field.Invalid(p, res, "use '*.' to encrypt all the resources from core API group or *.* to encrypt all resources"))
		case gr.Group == "events.k8s.io":
			errs = append(errs, field.Invalid(p, res, "'*.events.k8s.io' objects are stored using the 'events' API group in etcd. Use 'events' instead in the config file"))
		case gr.Group == "extensions":
			errs = append(errs, field.Invalid(p, res, "'extensions' group has been removed and cannot be used for encryption"))
		case gr.Group == "*" && gr.Resource != "*":
			errs = append(errs, field.Invalid(p, res, "encrypting the same resource across groups is not supported"))
		}
	}
	return errs
}
