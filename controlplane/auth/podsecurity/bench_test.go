package podsecurity_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// BenchmarkValidatePod is the admission's cost per pod create in a
// privileged namespace (the default: one namespace read, no checks) and
// in a restricted one (every check of restricted:latest), with the
// namespace read from memory.
//
//	go test -run XXX -bench ValidatePod ./controlplane/auth/podsecurity/
func BenchmarkValidatePod(b *testing.B) {
	c := &cluster{ns: map[string]*corev1.Namespace{"open": ns("open", nil), "strict": ns("strict", restricted("restricted"))}}
	a := newAdmission(b, c, "")
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
	}{
		{"privileged", plainPod("open", "p")},
		{"restricted-allowed", restrictedPod("strict", "p")},
		{"restricted-denied", plainPod("strict", "p")},
	} {
		attrs := createPod(tc.pod)
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				a.Validate(context.Background(), attrs)
			}
		})
	}
}
