package containerdtest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// fakeShimEnv makes the test binary a stand-in for a shim: it blocks
// until killed.
const fakeShimEnv = "CONTAINERDTEST_FAKE_SHIM"

func TestMain(m *testing.M) {
	if os.Getenv(fakeShimEnv) != "" {
		select {}
	}
	os.Exit(m.Run())
}

// A shim still running when its daemon's tasks are deleted and the
// daemon stopped is killed at cleanup, found by the socket its command
// line names: a runc v2 shim writes no shim.pid into its bundle (only
// the v1 shim does), and a shim may outlive its bundle (containerd
// deletes it although the shim did not answer its Shutdown in time, "the
// shim might be leaked"). The stand-in shim has no pid file, as those.
func TestCleanupKillsShimsWithoutBundle(t *testing.T) {
	Require(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var shim *exec.Cmd
	other := exec.Command(exe)
	t.Run("daemon", func(t *testing.T) {
		d := Start(t)
		shim = &exec.Cmd{Path: exe, Args: []string{"containerd-shim-runc-v2", "-namespace", "orca", "-id", "leaked", "-address", d.Address()},
			Env: append(os.Environ(), fakeShimEnv+"=1")}
		// A shim of another daemon stays.
		other = &exec.Cmd{Path: exe, Args: []string{"containerd-shim-runc-v2", "-namespace", "orca", "-id", "other", "-address", d.Address() + ".other"},
			Env: append(os.Environ(), fakeShimEnv+"=1")}
		for _, c := range []*exec.Cmd{shim, other} {
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Cleanup(func() {
		other.Process.Kill()
		other.Wait()
	})
	if shim == nil || shim.Process == nil {
		t.Fatal("the stand-in shim did not start")
	}
	done := make(chan error, 1)
	go func() { done <- shim.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		shim.Process.Kill()
		<-done
		t.Fatal("a shim of the daemon outlived the daemon's cleanup")
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", other.Process.Pid)); err != nil || strings.Fields(string(b))[2] == "Z" {
		t.Errorf("the shim of another daemon was killed (%v)", err)
	}
}

func TestIsShimOf(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "n", "-id", "x", "-address", "/run/c.sock"}, true},
		{[]string{"containerd-shim-runc-v2", "-address", "unix:///run/c.sock"}, true},
		{[]string{"containerd-shim-runc-v2", "-address=/run/c.sock"}, true},
		{[]string{"containerd-shim-runc-v2", "-address", "/run/c.sock.other"}, false},
		{[]string{"containerd", "-address", "/run/c.sock"}, false},
		{[]string{"containerd-shim-runc-v2", "-address"}, false},
		{nil, false},
	} {
		if got := isShimOf(tc.args, "/run/c.sock"); got != tc.want {
			t.Errorf("isShimOf(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
