// Package logfile writes and reads container log files in the CRI format
// the kubelet uses (k8s.io/cri-api, pkg/kubelet/kuberuntime/logs): one
// record per line,
//
//	<RFC3339Nano time> <stream> <tag> <content>
//
// where stream is "stdout" or "stderr" and tag is "F" for a full line or
// "P" for a partial one (output that did not end in a newline; the next
// record continues it). Runtimes write with Writer, the node agent reads
// with ParseLine, so `kubectl logs --timestamps` and `--since` work.
package logfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Streams.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// File is a log file open for appending. Safe for concurrent use.
type File struct {
	mu sync.Mutex // serializes appends, so records never interleave
	f  *os.File
}

// Open opens (creating it and its directory) the log file at path for
// appending. An empty path discards everything.
func Open(path string) (*File, error) {
	if path == "" {
		return &File{}, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &File{f: f}, nil
}

// Close closes the file.
func (l *File) Close() error {
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}

// Writer returns a writer for stream (Stdout or Stderr). It keeps no
// state between writes: each Write becomes records at once (its last
// piece tagged P when it does not end in a newline), so one Writer may be
// shared by concurrent instances without mixing their lines' bytes.
func (l *File) Writer(stream string) *Writer { return &Writer{file: l, stream: stream} }

// Writer appends one stream's output as records.
type Writer struct {
	file   *File
	stream string
	now    func() time.Time // for tests; nil = time.Now
}

// Write implements io.Writer.
func (w *Writer) Write(p []byte) (int, error) {
	if w.file.f == nil || len(p) == 0 {
		return len(p), nil
	}
	now := time.Now
	if w.now != nil {
		now = w.now
	}
	ts := now().UTC().Format(time.RFC3339Nano)
	var buf bytes.Buffer
	for rest := p; len(rest) > 0; {
		line, after, full := bytes.Cut(rest, []byte{'\n'})
		tag := " F "
		if !full {
			tag = " P "
		}
		buf.WriteString(ts)
		buf.WriteByte(' ')
		buf.WriteString(w.stream)
		buf.WriteString(tag)
		buf.Write(line)
		buf.WriteByte('\n')
		rest = after
	}
	w.file.mu.Lock()
	defer w.file.mu.Unlock()
	if _, err := w.file.f.Write(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

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
