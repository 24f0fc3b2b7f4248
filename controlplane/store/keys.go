package store

import (
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// MaxKeyBytes bounds an encoded KV key (or watch filter): 1024 bytes.
//
// A key is part of the subject of every KV operation, and nats-server
// closes a client connection whose protocol line exceeds its
// max_control_line (4 KiB by default); nats.go does not reconnect after
// that, so one over-long key would cut the whole process off from the
// cluster. Every valid object name fits easily: a namespace is at most 63
// bytes, a name at most 253, and a node-pod projection key is node +
// namespace + name, at most 571 bytes before escapes of characters valid
// names never contain.
const MaxKeyBytes = 1024

// checkKey returns a 400 BadRequest when key cannot be sent to NATS: empty,
// an empty token, or longer than MaxKeyBytes. what names the operation for
// the message. Callers that look an object up turn it into a 404 (no
// object can have that key).
func checkKey(what, key string) error {
	switch {
	case len(key) > MaxKeyBytes:
		return apierrors.NewBadRequest(fmt.Sprintf("%s: key is %d bytes long; the limit is %d bytes", what, len(key), MaxKeyBytes))
	case key == "" || strings.HasPrefix(key, ".") || strings.HasSuffix(key, ".") || strings.Contains(key, ".."):
		return apierrors.NewBadRequest(fmt.Sprintf("%s: key %q has an empty token (an empty name or namespace)", what, key))
	}
	return nil
}

// Key layout (README, design decision 2): a namespaced object lives under
// "<namespace>.<name>", a cluster-scoped one under "<name>". NATS keys may
// hold only [-/_=.A-Za-z0-9] and use "." as a token separator, so a name is
// escaped token by token:
//
//	"."  -> "_"    (valid Kubernetes names never contain "_")
//	any byte outside [-/A-Za-z0-9] (including "_" and "=") -> "=XX" (hex)
//
// Every valid Kubernetes name therefore maps to a readable key
// ("default.web-7d4f" or "default.app_v1" for "app.v1"), and the mapping is
// reversible for every string.

// EncodeName escapes one name so it is a single NATS key token.
func EncodeName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '.':
			b.WriteByte('_')
		case c == '-' || c == '/' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'):
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "=%02X", c)
		}
	}
	return b.String()
}

// DecodeName reverses EncodeName. It fails on a malformed escape.
func DecodeName(tok string) (string, error) {
	var b strings.Builder
	b.Grow(len(tok))
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch c {
		case '_':
			b.WriteByte('.')
		case '=':
			if i+2 >= len(tok) {
				return "", fmt.Errorf("decode key token %q: truncated escape", tok)
			}
			var v byte
			if _, err := fmt.Sscanf(tok[i+1:i+3], "%02X", &v); err != nil {
				return "", fmt.Errorf("decode key token %q: bad escape: %w", tok, err)
			}
			b.WriteByte(v)
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// Key returns the KV key of an object: "<namespace>.<name>" or, when
// namespace is empty (cluster-scoped kinds), "<name>".
func Key(namespace, name string) string {
	if namespace == "" {
		return EncodeName(name)
	}
	return EncodeName(namespace) + "." + EncodeName(name)
}

// SplitKey reverses Key.
func SplitKey(key string) (namespace, name string, err error) {
	parts := strings.Split(key, ".")
	switch len(parts) {
	case 1:
		name, err = DecodeName(parts[0])
		return "", name, err
	case 2:
		if namespace, err = DecodeName(parts[0]); err != nil {
			return "", "", err
		}
		name, err = DecodeName(parts[1])
		return namespace, name, err
	default:
		return "", "", fmt.Errorf("split key %q: want 1 or 2 tokens, got %d", key, len(parts))
	}
}
