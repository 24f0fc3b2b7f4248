package nodeagent

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// fileProjection is one file of an API-data volume (configMap, secret,
// downwardAPI, projected): its content and mode bits.
type fileProjection struct {
	Data []byte
	Mode os.FileMode
}

// Names inside an atomically written volume, as the kubelet's AtomicWriter.
const (
	atomicDataDir    = "..data"
	atomicDataDirTmp = "..data_tmp"
)

// writeAtomic makes dir hold exactly payload (paths relative to dir,
// validated: no "..", not absolute, no leading ".."), the kubelet's
// AtomicWriter way (pkg/volume/util/atomic_writer.go): the files are
// written into a fresh timestamped directory "..<time>.<random>", a
// symlink "..data_tmp" to it is renamed over "..data" (one atomic
// rename), and each top-level path of the payload is a symlink
// "<path>" -> "..data/<path>". A reader therefore sees the old or the new
// set of files, never a mix. Symlinks of paths no longer in the payload
// and the previous timestamped directory are removed afterwards. gid >= 0
// makes every file and directory group-owned by gid and group-readable
// (the pod's fsGroup, as the kubelet's SetVolumeOwnership). It reports
// whether anything changed; an unchanged payload writes nothing.
func writeAtomic(dir string, payload map[string]fileProjection, gid int64) (bool, error) {
	for p := range payload {
		if err := validateProjectedPath(p); err != nil {
			return false, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	oldTS, _ := os.Readlink(filepath.Join(dir, atomicDataDir))
	if oldTS != "" && sameContent(filepath.Join(dir, oldTS), payload, gid) {
		return false, nil
	}
	ts, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return false, err
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		os.RemoveAll(ts)
		return false, err
	}
	for p, f := range payload {
		if err := writeProjected(ts, p, f, gid); err != nil {
			os.RemoveAll(ts)
			return false, fmt.Errorf("write %s: %w", p, err)
		}
	}
	if gid >= 0 {
		os.Lchown(ts, -1, int(gid))
	}
	tmp := filepath.Join(dir, atomicDataDirTmp)
	os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		os.RemoveAll(ts)
		return false, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, atomicDataDir)); err != nil {
		os.Remove(tmp)
		os.RemoveAll(ts)
		return false, err
	}
	// User-visible links: one per top-level path of the payload.
	top := map[string]bool{}
	for p := range payload {
		first, _, _ := strings.Cut(p, "/")
		top[first] = true
	}
	for name := range top {
		link := filepath.Join(dir, name)
		if t, err := os.Readlink(link); err == nil && t == filepath.Join(atomicDataDir, name) {
			continue
		}
		os.RemoveAll(link)
		if err := os.Symlink(filepath.Join(atomicDataDir, name), link); err != nil {
			return true, err
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, "..") {
			if n != atomicDataDir && n != filepath.Base(ts) {
				os.RemoveAll(filepath.Join(dir, n)) // the previous (or a stale) timestamped directory
			}
			continue
		}
		if !top[n] {
			os.RemoveAll(filepath.Join(dir, n))
		}
	}
	return true, nil
}

// samePayload reports whether a and b hold the same files and modes.
func samePayload(a, b map[string]fileProjection) bool {
	return maps.EqualFunc(a, b, func(x, y fileProjection) bool { return x.Mode == y.Mode && bytes.Equal(x.Data, y.Data) })
}

// writeProjected writes one file of the payload under ts.
func writeProjected(ts, p string, f fileProjection, gid int64) error {
	full := filepath.Join(ts, p)
	if d := filepath.Dir(full); d != ts {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if gid >= 0 {
			for x := d; x != ts; x = filepath.Dir(x) {
				os.Lchown(x, -1, int(gid))
			}
		}
	}
	mode := f.Mode
	if gid >= 0 {
		mode |= 0o440
	}
	if err := os.WriteFile(full, f.Data, mode); err != nil {
		return err
	}
	if gid >= 0 {
		if err := os.Lchown(full, -1, int(gid)); err != nil {
			return err
		}
	}
	return os.Chmod(full, mode) // not filtered by the umask
}

// sameContent reports whether the timestamped directory ts holds exactly
// payload (content and mode).
func sameContent(ts string, payload map[string]fileProjection, gid int64) bool {
	n := 0
	err := filepath.WalkDir(ts, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(ts, path)
		f, ok := payload[rel]
		if !ok {
			return os.ErrNotExist
		}
		info, err := d.Info()
		want := f.Mode
		if gid >= 0 {
			want |= 0o440
		}
		if err != nil || info.Mode().Perm() != want.Perm() {
			return os.ErrInvalid
		}
		b, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(b, f.Data) {
			return os.ErrInvalid
		}
		n++
		return nil
	})
	return err == nil && n == len(payload)
}

// validateProjectedPath checks a payload path as the AtomicWriter's
// validatePath: relative, not empty, no ".." element, not starting with "..".
func validateProjectedPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("invalid path: must not be empty")
	case filepath.IsAbs(p):
		return fmt.Errorf("invalid path %q: must be relative", p)
	case strings.HasPrefix(p, ".."):
		return fmt.Errorf("invalid path %q: must not start with '..'", p)
	case slices.Contains(strings.Split(p, "/"), ".."):
		return fmt.Errorf("invalid path %q: must not contain '..'", p)
	case filepath.Clean(p) != p:
		return fmt.Errorf("invalid path %q: must be clean", p)
	}
	return nil
}
