package bootstrap

import (
	"strings"
	"testing"
)

// FuzzParseToken: any string either is "<6>.<16>" of [a-z0-9] and splits
// back into itself, or is refused; it never panics.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"abcdef.0123456789abcdef", "abcdef.0123456789abcde", "ABCDEF.0123456789abcdef", "", ".", "abcdef.0123456789abcdef\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, err := ParseToken(s)
		if err != nil {
			if strings.Contains(err.Error(), s) && len(s) > 8 {
				t.Fatalf("the error repeats the token: %v", err)
			}
			return
		}
		if id+"."+secret != s || !IsValidTokenID(id) || len(secret) != 16 {
			t.Fatalf("%q split into %q %q", s, id, secret)
		}
	})
}
