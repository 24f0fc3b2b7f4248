package logfile

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestWriteThenParse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c", "0.log")
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC)
	out, errw := f.Writer(Stdout), f.Writer(Stderr)
	out.now, errw.now = func() time.Time { return at }, func() time.Time { return at }
	out.Write([]byte("one\ntwo\n"))
	errw.Write([]byte("part"))
	errw.Write([]byte("ial\n\n"))
	f.Close()

	data, _ := os.ReadFile(path)
	want := "2026-11-29T12:00:00.123456789Z stdout F one\n" +
		"2026-11-29T12:00:00.123456789Z stdout F two\n" +
		"2026-11-29T12:00:00.123456789Z stderr P part\n" +
		"2026-11-29T12:00:00.123456789Z stderr F ial\n" +
		"2026-11-29T12:00:00.123456789Z stderr F \n"
	if string(data) != want {
		t.Fatalf("file:\n%s\nwant:\n%s", data, want)
	}
	var got []Line
	for _, l := range splitLines(data) {
		rec, err := ParseLine(l)
		if err != nil {
			t.Fatalf("ParseLine(%q): %v", l, err)
		}
		got = append(got, rec)
	}
	if len(got) != 5 || !got[2].Partial || got[3].Partial || string(got[2].Content)+string(got[3].Content) != "partial" ||
		got[0].Stream != Stdout || got[4].Stream != Stderr || len(got[4].Content) != 0 || !got[0].Time.Equal(at) {
		t.Errorf("parsed %+v", got)
	}
}

func splitLines(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != '\n' {
			i++
		}
		out = append(out, b[:min(i+1, len(b))])
		b = b[min(i+1, len(b)):]
	}
	return out
}

func TestParseLineRejects(t *testing.T) {
	for _, s := range []string{"", "raw output", "2026-11-29T12:00:00Z stdin F x", "2026-11-29T12:00:00Z stdout X x", "yesterday stdout F x"} {
		if _, err := ParseLine([]byte(s)); err == nil {
			t.Errorf("ParseLine(%q): want ErrFormat", s)
		}
	}
}

// TestConcurrentWritersKeepRecordsWhole: many instances share one Writer;
// every line in the file is still a whole record.
func TestConcurrentWritersKeepRecordsWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	w := f.Writer(Stderr)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				w.Write([]byte("instance " + string(rune('a'+i)) + " says hello\n"))
			}
		}()
	}
	wg.Wait()
	f.Close()
	data, _ := os.ReadFile(path)
	lines := splitLines(data)
	if len(lines) != 1000 {
		t.Fatalf("%d records, want 1000", len(lines))
	}
	for _, l := range lines {
		if rec, err := ParseLine(l); err != nil || rec.Partial || len(rec.Content) != len("instance a says hello") {
			t.Fatalf("record %q: %+v %v", l, rec, err)
		}
	}
}
