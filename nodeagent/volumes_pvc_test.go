package nodeagent

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// The agent removes only a directory it made for the volume named, at the
// path it recorded.
func TestDeleteLocalVolume(t *testing.T) {
	a := &Agent{cfg: Config{DataDir: t.TempDir()}}
	a.log = slog.New(slog.DiscardHandler)
	dir := filepath.Join(a.localStoragePath(), "pvc-1_default_data")
	if err := a.makeLocalVolume("pvc-1", dir); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o777 {
		t.Fatalf("volume directory: %v %v", st, err)
	}
	other := filepath.Join(t.TempDir(), "precious")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ volume, path string }{
		{"pvc-1", other},                // not where pvc-1 was made
		{"../local-volumes/pvc-1", dir}, // not a volume name
	} {
		if err := a.deleteLocalVolume(tc.volume, tc.path); err == nil {
			t.Errorf("delete %s at %s: no error", tc.volume, tc.path)
		}
	}
	if err := a.deleteLocalVolume("pvc-unknown", other); err != nil {
		t.Errorf("a volume never made here: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("a directory the agent did not make was removed: %v", err)
	}
	if err := a.deleteLocalVolume("pvc-1", dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("volume directory still there: %v", err)
	}
	if err := a.deleteLocalVolume("pvc-1", dir); err != nil {
		t.Fatalf("a second delete: %v", err)
	}
}
