package logfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// readAll reads r to its first io.EOF and returns the records' contents.
func readAll(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rec, err := ParseLine(sc.Bytes())
		if err != nil {
			t.Fatalf("record %q: %v", sc.Bytes(), err)
		}
		out = append(out, string(rec.Content))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// onDisk returns the total size and the number of the log's files.
func onDisk(t *testing.T, dir string) (total int64, files int, largest int64) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		total += info.Size()
		largest = max(largest, info.Size())
		files++
	}
	return total, files, largest
}

// TestRotationBoundsDisk writes 100 times MaxSize: the log never takes
// more than MaxSize*MaxFiles on disk, and what is kept is the newest
// lines, whole and in order.
func TestRotationBoundsDisk(t *testing.T) {
	const maxSize, maxFiles, n = 4096, 3, 8000 // records of ~45 bytes: ~360 KB
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	f, err := OpenRotating(path, Rotation{MaxSize: maxSize, MaxFiles: maxFiles})
	if err != nil {
		t.Fatal(err)
	}
	w := f.Writer(Stdout)
	for i := 1; i <= n; {
		// Writes of 1 to 7 lines, so records straddle the limit at every offset.
		var b strings.Builder
		for k := 0; k < 1+i%7 && i <= n; k++ {
			fmt.Fprintf(&b, "line %d\n", i)
			i++
		}
		if _, err := w.Write([]byte(b.String())); err != nil {
			t.Fatal(err)
		}
		if total, files, largest := onDisk(t, dir); total > maxSize*maxFiles || files > maxFiles || largest > maxSize {
			t.Fatalf("after line %d: %d bytes in %d files (largest %d), want <= %d in <= %d", i-1, total, files, largest, maxSize*maxFiles, maxFiles)
		}
	}
	f.Close()
	total, files, _ := onDisk(t, dir)
	if files != maxFiles || total < maxSize*(maxFiles-1) {
		t.Errorf("%d bytes in %d files: rotated too early", total, files)
	}
	r, err := OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := readAll(t, r)
	if len(got) < 100 || got[len(got)-1] != fmt.Sprintf("line %d", n) {
		t.Fatalf("kept %d lines ending %q", len(got), got[len(got)-1:])
	}
	first := n - len(got) + 1
	for i, l := range got {
		if want := fmt.Sprintf("line %d", first+i); l != want {
			t.Fatalf("kept line %d is %q, want %q", i, l, want)
		}
	}
}

// TestLongLinesSplit: a line longer than MaxLineSize becomes partial
// records, so even a guest that never writes a newline is rotated.
func TestLongLinesSplit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	f, err := OpenRotating(path, Rotation{MaxSize: 64 << 10, MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	w := f.Writer(Stderr)
	long := strings.Repeat("x", 10*MaxLineSize+5)
	for range 3 {
		w.Write([]byte(long))
	}
	f.Close()
	if total, files, largest := onDisk(t, dir); total > 2*64<<10 || files != 2 || largest > 64<<10 {
		t.Errorf("%d bytes in %d files (largest %d)", total, files, largest)
	}
	r, err := OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 2*MaxLineSize)
	for sc.Scan() {
		rec, err := ParseLine(sc.Bytes())
		if err != nil || !rec.Partial || len(rec.Content) > MaxLineSize {
			t.Fatalf("record of %d bytes: partial %v, %v", len(rec.Content), rec.Partial, err)
		}
	}
}

// TestReaderFollowsRotation: a reader at the end of the log keeps up with
// a writer across many rotations and sees every line once, in order.
func TestReaderFollowsRotation(t *testing.T) {
	const n = 20000
	path := filepath.Join(t.TempDir(), "0.log")
	f, err := OpenRotating(path, Rotation{MaxSize: 4096, MaxFiles: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The writer holds a credit per line in flight and stays within 150
	// lines (about 2 files) of the reader: this test is about following,
	// not about falling behind. It signals written after each line, which
	// the reader waits for at the end of the log.
	var read atomic.Int64
	credits := make(chan struct{}, 150)
	written := make(chan struct{}, 1)
	werr := make(chan error, 1)
	go func() {
		w := f.Writer(Stdout)
		for i := 1; i <= n; i++ {
			credits <- struct{}{}
			if _, err := fmt.Fprintf(w, "line %d\n", i); err != nil {
				werr <- err
				return
			}
			select {
			case written <- struct{}{}:
			default:
			}
		}
		werr <- nil
	}()
	br := bufio.NewReader(r)
	timeout := time.After(10 * time.Second)
	var pending []byte
	for read.Load() < n {
		b, err := br.ReadSlice('\n')
		pending = append(pending, b...)
		if errors.Is(err, io.EOF) {
			select {
			case <-written:
			case <-timeout:
				t.Fatalf("read %d of %d lines", read.Load(), n)
			}
			continue
		}
		if err != nil {
			t.Fatalf("after %d lines: %v", read.Load(), err)
		}
		rec, perr := ParseLine(pending)
		pending = pending[:0]
		if want := fmt.Sprintf("line %d", read.Load()+1); perr != nil || string(rec.Content) != want {
			t.Fatalf("got %q (%v), want %q", rec.Content, perr, want)
		}
		read.Add(1)
		<-credits
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if rotated := rotatedFiles(path); len(rotated) != 3 {
		t.Errorf("rotated files %v: want 3 (MaxFiles 4)", rotated)
	}
}

// TestReaderFellBehind: a reader whose next file was removed by rotation
// fails with ErrFellBehind instead of skipping it.
func TestReaderFellBehind(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	f, err := OpenRotating(path, Rotation{MaxSize: 1024, MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := f.Writer(Stdout)
	fmt.Fprintf(w, "first\n")
	r, err := OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range 200 { // ~9 KB: 8 rotations
		fmt.Fprintf(w, "line %d\n", i)
	}
	_, err = io.ReadAll(r)
	if !errors.Is(err, ErrFellBehind) {
		t.Fatalf("read: %v, want ErrFellBehind", err)
	}
}

func TestRotationValidate(t *testing.T) {
	for _, tc := range []struct {
		r  Rotation
		ok bool
	}{{Rotation{}, true}, {Rotation{MaxSize: -1}, true}, {Rotation{MaxFiles: 2}, true}, {Rotation{MaxFiles: 1}, false}, {Rotation{MaxFiles: -3}, false}} {
		if err := tc.r.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v", tc.r, err)
		}
	}
	if _, err := OpenRotating(filepath.Join(t.TempDir(), "0.log"), Rotation{MaxFiles: 1}); err == nil {
		t.Error("OpenRotating with MaxFiles 1 succeeded")
	}
}

// TestNoRotation: a negative MaxSize never rotates.
func TestNoRotation(t *testing.T) {
	dir := t.TempDir()
	f, err := OpenRotating(filepath.Join(dir, "0.log"), Rotation{MaxSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	w := f.Writer(Stdout)
	for i := range 1000 {
		fmt.Fprintf(w, "line %d\n", i)
	}
	f.Close()
	if _, files, _ := onDisk(t, dir); files != 1 {
		t.Errorf("%d files", files)
	}
}
