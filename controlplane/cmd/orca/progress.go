package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Values of --progress.
const (
	progressAuto   = "auto"   // on a terminal only
	progressAlways = "always" // even when stderr is not a terminal (tests, logs)
	progressNever  = "never"
)

// withProgress returns r wrapped to draw an upload's progress (bytes
// sent of size, rate, time left) on w, and the function that ends the
// bar. With mode "auto" the bar is drawn only when w is a terminal;
// "never" draws nothing; "always" draws it anyway.
func withProgress(r io.Reader, size int64, what string, w io.Writer, mode string) (io.Reader, func(), error) {
	switch mode {
	case progressAuto:
		f, ok := w.(*os.File)
		if !ok || !term.IsTerminal(int(f.Fd())) {
			return r, func() {}, nil
		}
	case progressAlways:
	case progressNever:
		return r, func() {}, nil
	default:
		return nil, nil, fmt.Errorf("--progress %q: want auto, always or never", mode)
	}
	bar := progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionUseIECUnits(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)
	pr := progressbar.NewReader(r, bar)
	return &pr, func() { bar.Finish() }, nil
}
