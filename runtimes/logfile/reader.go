package logfile

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrFellBehind is returned by Reader.Read when a file rotated from the log
// was removed (past MaxFiles) before the reader got to it: what it held is
// lost to this reader.
var ErrFellBehind = errors.New("log rotated away before it was read")

// Reader reads a log and the files rotated from it as one stream, oldest
// first. At the end of the current file Read returns io.EOF; a later Read
// returns what was written since, continuing into the new file after a
// rotation (as `tail -F`). Not safe for concurrent use.
type Reader struct {
	path    string
	files   []*os.File // opened by OpenReader, not yet read; the last was current then
	cur     *os.File
	curStat os.FileInfo
	rotated bool // cur is no longer at path: read it to its end, then go on to its successor
}

// OpenReader opens the log at path and the files rotated from it that are
// still on disk, positioned at the start of the oldest. It fails when path
// cannot be opened (os.ErrNotExist when there is no log).
func OpenReader(path string) (*Reader, error) {
	for range 10 {
		files, err := openAll(path)
		if err != nil {
			return nil, err
		}
		if files != nil {
			r := &Reader{path: path, files: files[1:]}
			if err := r.use(files[0]); err != nil {
				r.Close()
				return nil, err
			}
			return r, nil
		}
	}
	return nil, fmt.Errorf("open log %s: %w", path, ErrFellBehind)
}

// openAll opens path and then the rotated files older than it, and
// returns them oldest first; nil (and no error) when path was rotated and
// removed meanwhile, so the caller tries again.
func openAll(path string) ([]*os.File, error) {
	cur, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	curStat, err := cur.Stat()
	if err != nil {
		cur.Close()
		return nil, err
	}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
		files = nil
	}
	found := false // cur was rotated while we listed: it is among the rotated files
	for _, name := range rotatedFiles(path) {
		f, err := os.Open(name)
		if errors.Is(err, os.ErrNotExist) {
			closeAll() // removed as the oldest: those opened before it are older still, and not contiguous with the rest
			continue
		}
		if err != nil {
			closeAll()
			cur.Close()
			return nil, err
		}
		if st, err := f.Stat(); err == nil && os.SameFile(st, curStat) {
			f.Close()
			found = true
			break // the rest are newer than cur
		}
		files = append(files, f)
	}
	if st, err := os.Stat(path); !found && (err != nil || !os.SameFile(st, curStat)) {
		// cur was rotated and is no longer among the rotated files we
		// listed: what we opened may be newer than it.
		closeAll()
		cur.Close()
		return nil, nil
	}
	return append(files, cur), nil
}

// Files returns the files the Reader will read, oldest first; the last
// was the current file when the Reader was opened. It is for a caller that
// positions the Reader with StartAt before the first Read.
func (r *Reader) Files() []*os.File { return append([]*os.File{r.cur}, r.files...) }

// StartAt makes reading start at offset off of Files()[i] (closing the
// files before it). Call it before the first Read.
func (r *Reader) StartAt(i int, off int64) error {
	files := r.Files()
	if i < 0 || i >= len(files) {
		return fmt.Errorf("log %s: no file %d of %d", r.path, i, len(files))
	}
	for _, f := range files[:i] {
		f.Close()
	}
	r.files = files[i+1:]
	if err := r.use(files[i]); err != nil {
		return err
	}
	_, err := r.cur.Seek(off, io.SeekStart)
	return err
}

func (r *Reader) use(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	r.cur, r.curStat, r.rotated = f, st, false
	return nil
}

// Read implements io.Reader. It returns io.EOF at the end of the current
// file, and ErrFellBehind when a rotated file it had not opened yet was
// removed.
func (r *Reader) Read(p []byte) (int, error) {
	for {
		n, err := r.cur.Read(p)
		if n > 0 || (err != nil && err != io.EOF) {
			return n, err
		}
		if len(r.files) > 0 { // one of the files opened together: the next follows it
			r.cur.Close()
			if err := r.use(r.files[0]); err != nil {
				return 0, err
			}
			r.files = r.files[1:]
			continue
		}
		if !r.rotated {
			st, err := os.Stat(r.path)
			if err != nil || os.SameFile(st, r.curStat) {
				return 0, io.EOF // not rotated (or the log was removed)
			}
			// Rotated: what was written to cur before the rotation may not
			// have been read yet.
			r.rotated = true
			continue
		}
		next, err := r.successor()
		if err != nil {
			return 0, err
		}
		r.cur.Close()
		if err := r.use(next); err != nil {
			return 0, err
		}
	}
}

// successor opens the file written after cur, which was rotated: the next
// rotated file, or the current one.
func (r *Reader) successor() (*os.File, error) {
	cur, err := os.Open(r.path) // before listing: if it is rotated too, the listing has it
	if err != nil {
		return nil, err
	}
	curStat, err := cur.Stat()
	if err != nil {
		cur.Close()
		return nil, err
	}
	rotated := rotatedFiles(r.path)
	at := -1
	for i, name := range rotated {
		if st, err := os.Stat(name); err == nil && os.SameFile(st, r.curStat) {
			at = i
			break
		}
	}
	switch {
	case at < 0:
		cur.Close()
		return nil, fmt.Errorf("read log %s: %w", r.path, ErrFellBehind)
	case at == len(rotated)-1:
		return cur, nil
	}
	next := rotated[at+1]
	if st, err := os.Stat(next); err == nil && os.SameFile(st, curStat) {
		return cur, nil // rotated after we opened it (or being rotated)
	}
	cur.Close()
	f, err := os.Open(next)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read log %s: %w", r.path, ErrFellBehind)
	}
	return f, err
}

// Close closes the files.
func (r *Reader) Close() error {
	for _, f := range r.Files() {
		if f != nil {
			f.Close()
		}
	}
	return nil
}
