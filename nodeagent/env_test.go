package nodeagent

import "testing"

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
		if got := expand(in, vals); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}
