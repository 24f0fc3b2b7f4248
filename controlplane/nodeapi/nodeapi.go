// Package nodeapi is the small NATS protocol between the control plane and
// node agents for what does not go through the store: reading a container's
// log. (The kubelet's HTTPS port plays this part in Kubernetes; over NATS an
// agent behind NAT is reachable too.)
//
// Logs: the apiserver sends a LogRequest to LogsSubject(node) with a reply
// inbox. The agent publishes the log as raw chunks to that inbox; an empty
// message with header "Orca-EOF" ends the stream, and a message with header
// "Orca-Error" carries an error text (and ends it too). For Follow, the
// apiserver publishes any message to CancelSubject when its client leaves.
package nodeapi

import "time"

// LogsSubject is the subject node agents serve log requests on.
func LogsSubject(node string) string { return "orca.node." + node + ".logs" }

// Header names used in the log stream.
const (
	HeaderEOF   = "Orca-EOF"
	HeaderError = "Orca-Error"
	// HeaderStatus carries the HTTP status for an error: "404", "400".
	HeaderStatus = "Orca-Status"
)

// LogRequest asks for one container's log.
type LogRequest struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// Container; "" means the pod's only container.
	Container string `json:"container,omitempty"`
	// Follow keeps the stream open and sends new lines as they are written.
	Follow bool `json:"follow,omitempty"`
	// TailLines, when > 0, starts at that many lines from the end.
	TailLines int64 `json:"tailLines,omitempty"`
	// Previous asks for the previous (terminated) attempt's log.
	Previous bool `json:"previous,omitempty"`
	// Timestamps prefixes each line with its RFC3339Nano time.
	Timestamps bool `json:"timestamps,omitempty"`
	// SinceTime, when set, skips lines written before it.
	SinceTime *time.Time `json:"sinceTime,omitempty"`
	// LimitBytes, when > 0, stops after that many bytes.
	LimitBytes int64 `json:"limitBytes,omitempty"`
	// CancelSubject is where the requester publishes to end a Follow stream.
	CancelSubject string `json:"cancelSubject,omitempty"`
}
