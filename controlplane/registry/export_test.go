package registry

import "github.com/orca-edge/orca/controlplane/store"

// SetTypedPrepare switches PrepareUpdate's typed status merge and spec
// comparison on or off (tests compare both ways) and returns a func
// restoring the previous setting.
func SetTypedPrepare(on bool) (restore func()) {
	was := typedPrepare
	typedPrepare = on
	return func() { typedPrepare = was }
}

// HasTypedLayout reports whether PrepareUpdate takes the typed path for
// objects of obj's type.
func HasTypedLayout(obj store.Object) bool { return layoutOf(obj) != nil }
