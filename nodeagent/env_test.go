package nodeagent

import (
	"strings"
	"testing"
)

// Cases from Kubernetes' third_party/forked/golang/expansion tests.
func TestExpand(t *testing.T) {
	vals := map[string]string{"VAR_A": "A", "VAR_B": "B", "EMPTY": ""}
	for in, want := range map[string]string{
		"$(VAR_A)":            "A",
		"___$(VAR_B)___":      "___B___",
		"$(VAR_A)-$(VAR_B)":   "A-B",
		"$$(VAR_A)":           "$(VAR_A)",
		"$$$(VAR_A)":          "$A",
		"$(EMPTY)x":           "x",
		"$(UNKNOWN)":          "$(UNKNOWN)",
		"$(VAR_A":             "$(VAR_A",
		"$VAR_A":              "$VAR_A",
		"$":                   "$",
		"f000-$$VAR_A":        "f000-$VAR_A",
		"$()":                 "$()",
		"plain":               "plain",
		"$(VAR_A)$(VAR_A)$$$": "AA$$",
	} {
		if got, ok := expand(in, vals, maxExpandedValue); !ok || got != want {
			t.Errorf("expand(%q) = %q, %v, want %q", in, got, ok, want)
		}
	}
}

func TestExpandLimit(t *testing.T) {
	vals := map[string]string{"A": strings.Repeat("a", 10)}
	for _, tc := range []struct {
		in    string
		limit int
		ok    bool
	}{
		{"$(A)", 10, true},
		{"$(A)x", 10, false},
		{"$(A)$(A)", 19, false},
		{"$(A)$(A)", 20, true},
		{"$(UNKNOWN)", 9, false},
		{"$$$$", 2, true},
		{"$(A", 2, false},
	} {
		got, ok := expand(tc.in, vals, tc.limit)
		if ok != tc.ok || len(got) > tc.limit {
			t.Errorf("expand(%q, limit %d) = %d bytes, %v; want ok %v", tc.in, tc.limit, len(got), ok, tc.ok)
		}
	}
}
