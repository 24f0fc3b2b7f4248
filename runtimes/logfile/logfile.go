// Package logfile writes and reads container log files in the CRI format
// the kubelet uses (k8s.io/cri-api, pkg/kubelet/kuberuntime/logs): one
// record per line,
//
//	<RFC3339Nano time> <stream> <tag> <content>
//
// where stream is "stdout" or "stderr" and tag is "F" for a full line or
// "P" for a partial one (output that did not end in a newline, or a line
// longer than MaxLineSize; the next record continues it). Runtimes write
// with File and Writer, the node agent reads with Reader and ParseLine, so
// `kubectl logs --timestamps` and `--since` work.
//
// # Rotation
//
// A File is rotated by size, as the kubelet's container log manager does
// with containerLogMaxSize and containerLogMaxFiles (defaults 10 MiB and 5
// files). The kubelet checks every 10 s; orca writes the file itself, so a
// File rotates inline, before the record that would take it past MaxSize:
// a file never passes MaxSize unless its first record alone does (records
// are at most MaxLineSize of content, 16 KiB, plus their 40-byte header).
// The rotated file is named as the kubelet names it,
// <name>.log.<UTC time>, with the time to the nanosecond
// ("0.log.20260102-150405.000000001") so that names sort in rotation order
// even when a file fills within a second; the oldest are removed so that
// at most MaxFiles files (the current one included) remain. Unlike the
// kubelet, rotated files are not compressed.
//
// A Reader reads the rotated files, oldest first, and then the current
// one, as one stream (the kubelet reads only the current file); a Reader
// that reached the end of the current file continues into the new one
// after a rotation.
package logfile

import (
	"bytes"
	"errors"
	"time"
)

// Streams.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// Line is one parsed record.
type Line struct {
	Time    time.Time
	Stream  string
	Partial bool   // content continues in the next record
	Content []byte // without the record's newline
}

// ErrFormat is returned by ParseLine for a line that is not a record.
var ErrFormat = errors.New("not a CRI log record")

// ParseLine parses one record, without or with its trailing newline.
func ParseLine(b []byte) (Line, error) {
	b = bytes.TrimSuffix(b, []byte{'\n'})
	ts, rest, ok := bytes.Cut(b, []byte{' '})
	if !ok {
		return Line{}, ErrFormat
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return Line{}, ErrFormat
	}
	stream, rest, ok := bytes.Cut(rest, []byte{' '})
	if !ok || (string(stream) != Stdout && string(stream) != Stderr) {
		return Line{}, ErrFormat
	}
	tag, content, ok := bytes.Cut(rest, []byte{' '})
	if !ok && len(rest) == 1 { // "F" with empty content and no space
		tag, content = rest, nil
	} else if !ok {
		return Line{}, ErrFormat
	}
	switch string(tag) {
	case "F", "P":
	default:
		return Line{}, ErrFormat
	}
	return Line{Time: t, Stream: string(stream), Partial: string(tag) == "P", Content: content}, nil
}
