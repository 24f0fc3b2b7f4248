// Package conformance drives every kubectl from 1.27 to 1.33 against a real
// orca through kubectl.sh, the kubectl conformance script: apply (a file, a
// directory, a multi-document file), create, replace, the three patch
// types, server-side apply, explain, get in every output format and in
// chunks, label, annotate, scale, rollout, wait, cordon/drain/uncordon and
// delete with each cascade. The script checks what kubectl prints, not
// only its exit code, and ends with "N passed, N failed".
//
// TestKubectlConformance (run by `make test`; alone by `make conformance`)
// starts the cluster the script needs in the test process and runs the
// script once per kubectl, in parallel, each in its own namespace and with
// its own node to drain. See kubectl.sh for what it needs from a cluster to
// run it against another one.
package conformance
