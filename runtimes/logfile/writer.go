package logfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Rotation defaults, the kubelet's (KubeletConfiguration
// containerLogMaxSize "10Mi", containerLogMaxFiles 5), and the longest
// record content, containerd's max_container_log_line_size.
const (
	DefaultMaxSize  = 10 << 20
	DefaultMaxFiles = 5
	MaxLineSize     = 16 << 10
)

// rotatedStamp is the suffix of a rotated file: the kubelet's
// "20060102-150405" with nanoseconds, fixed width so names sort by time.
const rotatedStamp = "20060102-150405.000000000"

// Rotation bounds the disk a log takes: at most MaxFiles files of at most
// MaxSize bytes each (see the package doc).
type Rotation struct {
	// MaxSize is the size in bytes a file may reach before it is rotated.
	// 0 means DefaultMaxSize (10 MiB); a negative size never rotates (the
	// kubelet's --container-log-max-size with a negative quantity).
	MaxSize int64
	// MaxFiles is the most files kept, the current one included. 0 means
	// DefaultMaxFiles (5); otherwise at least 2, as the kubelet requires.
	MaxFiles int
}

// WithDefaults returns r with zero fields set to the defaults.
func (r Rotation) WithDefaults() Rotation {
	if r.MaxSize == 0 {
		r.MaxSize = DefaultMaxSize
	}
	if r.MaxFiles == 0 {
		r.MaxFiles = DefaultMaxFiles
	}
	return r
}

// Validate reports a MaxFiles of 1 or less (other than the default 0).
func (r Rotation) Validate() error {
	if r = r.WithDefaults(); r.MaxFiles < 2 {
		return fmt.Errorf("container log max files %d: must be at least 2", r.MaxFiles)
	}
	return nil
}

type rotationKey struct{}

// WithRotation returns a context carrying r, for RotationFrom: the node
// agent sets it on the context it starts tasks with, so runtimes open
// their tasks' logs with the node's --container-log-max-size and
// --container-log-max-files.
func WithRotation(ctx context.Context, r Rotation) context.Context {
	return context.WithValue(ctx, rotationKey{}, r)
}

// RotationFrom returns the Rotation set by WithRotation, or the zero
// Rotation (the defaults).
func RotationFrom(ctx context.Context) Rotation {
	r, _ := ctx.Value(rotationKey{}).(Rotation)
	return r
}

// File is a log file open for appending. Safe for concurrent use.
type File struct {
	mu        sync.Mutex // guards the fields below; serializes appends, so records never interleave
	path      string
	rot       Rotation
	f         *os.File
	size      int64     // of f
	lastStamp time.Time // of the newest rotated file
}

// Open opens the log file at path with the default Rotation; see
// OpenRotating.
func Open(path string) (*File, error) { return OpenRotating(path, Rotation{}) }

// OpenRotating opens (creating it and its directory) the log file at path
// for appending, rotated as r says. An empty path discards everything. It
// fails for an invalid r (Validate) or when the file cannot be opened.
func OpenRotating(path string, r Rotation) (*File, error) {
	if path == "" {
		return &File{}, nil
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("open log %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	l := &File{path: path, rot: r.WithDefaults(), f: f, size: st.Size()}
	_ = os.Remove(l.tmpPath()) // left by a rotation cut short
	if rotated := rotatedFiles(path); len(rotated) > 0 {
		l.lastStamp, _ = rotatedTime(filepath.Base(path), filepath.Base(rotated[len(rotated)-1]))
	}
	return l, nil
}

// Close closes the file.
func (l *File) Close() error {
	if l.f == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
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

// Write implements io.Writer. A line longer than MaxLineSize becomes
// several records, all but the last tagged P.
func (w *Writer) Write(p []byte) (int, error) {
	if w.file.path == "" || len(p) == 0 {
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
		if len(line) > MaxLineSize {
			line, after, full = line[:MaxLineSize], rest[MaxLineSize:], false
		}
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
	if err := w.file.append(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// append writes whole records, rotating before the first record that
// would take the file past MaxSize. When rotation fails (the directory is
// not writable, say) the records are written to the current file all the
// same, and rotation is tried again on the next write: output is never
// dropped for rotation's sake. l.mu must be held.
func (l *File) append(recs []byte) error {
	rotateFailed := false
	for len(recs) > 0 {
		n := len(recs)
		if limit := l.rot.MaxSize; limit > 0 && !rotateFailed && l.size+int64(n) > limit {
			// The records that still fit, then a rotation.
			n = bytes.LastIndexByte(recs[:max(0, limit-l.size)], '\n') + 1
			if n == 0 && l.size > 0 {
				if err := l.rotate(); err != nil {
					rotateFailed = true
				}
				continue
			}
			if n == 0 { // an empty file, and its first record alone passes MaxSize
				n = bytes.IndexByte(recs, '\n') + 1
			}
		}
		if _, err := l.f.Write(recs[:n]); err != nil {
			return err
		}
		l.size += int64(n)
		recs = recs[n:]
	}
	return nil
}

func (l *File) tmpPath() string { return l.path + ".tmp" }

// rotate renames the current file to <path>.<time> and starts a new one,
// then removes the oldest rotated files past MaxFiles-1. The name path
// always exists: the current file is hard-linked to its rotated name and
// a new file is renamed over path (where links are not supported, path is
// renamed, and is missing for a moment). l.mu must be held.
func (l *File) rotate() error {
	stamp := time.Now().UTC()
	if !stamp.After(l.lastStamp) { // keep names in rotation order if the clock stepped back
		stamp = l.lastStamp.Add(time.Nanosecond)
	}
	name := l.path + "." + stamp.Format(rotatedStamp)
	nf, err := os.OpenFile(l.tmpPath(), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("rotate log %s: %w", l.path, err)
	}
	linked := os.Link(l.path, name) == nil
	if !linked {
		if err := os.Rename(l.path, name); err != nil {
			nf.Close()
			os.Remove(l.tmpPath())
			return fmt.Errorf("rotate log %s: %w", l.path, err)
		}
	}
	if err := os.Rename(l.tmpPath(), l.path); err != nil {
		nf.Close()
		os.Remove(l.tmpPath())
		if linked {
			os.Remove(name)
		} else {
			os.Rename(name, l.path)
		}
		return fmt.Errorf("rotate log %s: %w", l.path, err)
	}
	l.f.Close()
	l.f, l.size, l.lastStamp = nf, 0, stamp
	rotated := rotatedFiles(l.path)
	for len(rotated) > l.rot.MaxFiles-1 {
		if err := os.Remove(rotated[0]); err != nil && !errors.Is(err, os.ErrNotExist) {
			break // tried again at the next rotation
		}
		rotated = rotated[1:]
	}
	return nil
}

// rotatedFiles returns the paths of the files rotated from path, oldest
// first.
func rotatedFiles(path string) []string {
	dir, base := filepath.Dir(path), filepath.Base(path)
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if _, ok := rotatedTime(base, e.Name()); ok && e.Type().IsRegular() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out
}

// rotatedTime parses the time in name, the name of a file rotated from
// the file named base.
func rotatedTime(base, name string) (time.Time, bool) {
	s, ok := strings.CutPrefix(name, base+".")
	if !ok || len(s) != len(rotatedStamp) {
		return time.Time{}, false
	}
	t, err := time.Parse(rotatedStamp, s)
	return t, err == nil
}
