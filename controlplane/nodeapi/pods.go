package nodeapi

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// AnnotationHostPorts is set on a Pod by the node agent that runs it: a JSON
// object mapping each containerPort ("8080") to the node port it is served
// on (41234). A pod's ports are served on its node (a container pod's own
// IP is reachable from its node only, for now: README, "Pod network"), so
// the Endpoints controller publishes status.hostIP:<host port> for them.
const AnnotationHostPorts = "orca.dev/host-ports"

// RuntimeLabelPrefix + handler is the Node label, value "true", by which a
// node advertises a runtime handler ("runtime.orca.dev/wasm": "true").
const RuntimeLabelPrefix = "runtime.orca.dev/"

// RuntimeLabel returns the node label advertising handler.
func RuntimeLabel(handler string) string { return RuntimeLabelPrefix + handler }

// Runtime handler names and the RuntimeClass a pod without
// spec.runtimeClassName gets.
const (
	HandlerWasm       = "wasm"
	HandlerContainerd = "runc"
	// DefaultHandler runs pods that name no RuntimeClass.
	DefaultHandler = HandlerContainerd
)

// EncodeHostPorts renders m for AnnotationHostPorts.
func EncodeHostPorts(m map[int32]int32) string {
	s := make(map[string]int32, len(m))
	for k, v := range m {
		s[strconv.Itoa(int(k))] = v
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// DecodeHostPorts parses AnnotationHostPorts; "" gives an empty map.
func DecodeHostPorts(v string) (map[int32]int32, error) {
	out := map[int32]int32{}
	if v == "" {
		return out, nil
	}
	var s map[string]int32
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationHostPorts, err)
	}
	for k, p := range s {
		n, err := strconv.Atoi(k)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: key %q is not a port", AnnotationHostPorts, k)
		}
		out[int32(n)] = p
	}
	return out, nil
}
