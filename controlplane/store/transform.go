package store

import (
	"bytes"
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Transformer turns an encoded object into its stored form and back: the
// shape of Kubernetes' k8s.io/apiserver/pkg/storage/value.Transformer (the
// interface its etcd3 store uses for encryption at rest) with the
// authenticated data as bytes, so the store (and the node agent that links
// it) does not depend on k8s.io/apiserver; controlplane/auth/encryption
// adapts value.Transformer to it.
type Transformer interface {
	// TransformToStorage returns the stored form of data.
	TransformToStorage(ctx context.Context, data, authenticatedData []byte) ([]byte, error)
	// TransformFromStorage returns the encoded object of a stored value;
	// stale reports that the value should be rewritten even when the
	// object does not change (written with a key or provider that is no
	// longer the first).
	TransformFromStorage(ctx context.Context, data, authenticatedData []byte) (out []byte, stale bool, err error)
}

// ResourceTransformers gives the Transformer of each resource; nil means
// the resource's values are stored as they are.
type ResourceTransformers interface {
	TransformerForResource(schema.GroupResource) Transformer
}

// Values at rest.
//
// A store with Config.Transformers passes every value it writes to a KV
// bucket through the resource's Transformer and every value it reads
// back, on every path:
// Get, the read of GuaranteedUpdate and Delete, and the watch caches that
// feed List, ListPage, Watch and informers. The authenticated data of
// each value is "<bucket>/<key>" (Kubernetes uses the etcd key), so a
// ciphertext copied under another key does not decrypt.
//
// Encode and Decode stay the plain JSON codec; the transformation happens
// around the KV call, so GuaranteedUpdate still compares plaintexts to
// skip no-op writes.

// transformer returns the transformer of r, nil when its values are
// stored as they are.
func (s *Store) transformer(r Resource) Transformer {
	if s.cfg.Transformers == nil {
		return nil
	}
	return s.cfg.Transformers.TransformerForResource(r.GroupResource())
}

// authenticatedData is the authenticated data of key in r's bucket.
func authenticatedData(r Resource, key string) []byte {
	return []byte(r.Bucket() + "/" + key)
}

// toStorage transforms the encoded object data into its stored form.
func (s *Store) toStorage(ctx context.Context, r Resource, key string, data []byte) ([]byte, error) {
	t := s.transformer(r)
	if t == nil {
		return data, nil
	}
	out, err := t.TransformToStorage(ctx, data, authenticatedData(r, key))
	if err != nil {
		// An encryption failure is the server's, never the client's.
		return nil, apierrors.NewInternalError(fmt.Errorf("store: transform %s %s to storage: %w", r.Kind, key, err))
	}
	return out, nil
}

// fromStorage transforms a stored value back into the encoded object.
// stale reports that the value should be rewritten even when the object
// did not change (it was written with a key or provider that is no longer
// the first one, or in plain text), as Kubernetes' value.Read.
//
// Without a transformer for r, a value that starts with Kubernetes'
// encryption prefix "k8s:enc:" is an error that says so (this store has no
// key for it) instead of a JSON syntax error.
func (s *Store) fromStorage(ctx context.Context, r Resource, key string, data []byte) (out []byte, stale bool, err error) {
	t := s.transformer(r)
	if t == nil {
		if bytes.HasPrefix(data, encryptedPrefix) {
			return nil, false, apierrors.NewInternalError(fmt.Errorf("store: %s %s is encrypted at rest (%s) and this store has no encryption configuration for %s",
				r.Kind, key, providerPrefix(data), r.GroupResource()))
		}
		return data, false, nil
	}
	out, stale, err = t.TransformFromStorage(ctx, data, authenticatedData(r, key))
	if err != nil {
		return nil, false, apierrors.NewInternalError(fmt.Errorf("store: transform %s %s from storage: %w", r.Kind, key, err))
	}
	return out, stale, nil
}

// encryptedPrefix starts every value Kubernetes' encryption providers
// write ("k8s:enc:aesgcm:v1:<key>:", "k8s:enc:secretbox:v1:<key>:", ...).
var encryptedPrefix = []byte("k8s:enc:")

// providerPrefix returns the "k8s:enc:<provider>:v1:<key>:" start of an
// encrypted value (at most 128 bytes), for errors.
func providerPrefix(data []byte) string {
	colons := 0
	for i, b := range data {
		if i == 128 {
			return string(data[:i]) + "..."
		}
		if b == ':' {
			if colons++; colons == 5 {
				return string(data[:i+1])
			}
		}
	}
	return string(encryptedPrefix)
}
