package podnet_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/orca-edge/orca/nodeagent/podnet"
	"github.com/orca-edge/orca/nodeagent/podnet/podnettest"
)

// BenchmarkSandbox measures what the pod network adds to a container
// pod's start and end: Setup (a new namespace, CNI ADD of loopback and
// bridge) and Teardown (CNI DEL, the namespace), with the plugins run as
// processes as the kubelet's CRI runtime runs them.
func BenchmarkSandbox(b *testing.B) {
	podnettest.Require(b)
	n, err := podnet.New(podnettest.Config(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("setup", func(b *testing.B) {
		var uids []string
		for i := 0; b.Loop(); i++ {
			uid := fmt.Sprintf("bench-%d", i)
			if _, err := n.Setup(ctx, podnet.Pod{Namespace: "default", Name: uid, UID: uid}); err != nil {
				b.Fatal(err)
			}
			uids = append(uids, uid)
		}
		b.StopTimer()
		for _, uid := range uids {
			if err := n.Teardown(ctx, uid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("setup+teardown", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			uid := fmt.Sprintf("bench2-%d", i)
			if _, err := n.Setup(ctx, podnet.Pod{Namespace: "default", Name: uid, UID: uid}); err != nil {
				b.Fatal(err)
			}
			if err := n.Teardown(ctx, uid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reuse", func(b *testing.B) { // an adopted pod after an agent restart (CNI CHECK)
		p := podnet.Pod{Namespace: "default", Name: "reused", UID: "reused"}
		if _, err := n.Setup(ctx, p); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			n2, err := podnet.New(n.Config())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := n2.Setup(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if err := n.Teardown(ctx, p.UID); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkSandboxBurst sets up 50 sandboxes at once (a Deployment of 50
// landing on the node), then tears them down at once.
func BenchmarkSandboxBurst(b *testing.B) {
	podnettest.Require(b)
	n, err := podnet.New(podnettest.Config(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const pods = 50
	for i := 0; b.Loop(); i++ {
		errs := make(chan error, pods)
		for j := range pods {
			go func() {
				uid := fmt.Sprintf("burst-%d-%d", i, j)
				_, err := n.Setup(ctx, podnet.Pod{Namespace: "default", Name: uid, UID: uid})
				errs <- err
			}()
		}
		for range pods {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		for j := range pods {
			go func() { errs <- n.Teardown(ctx, fmt.Sprintf("burst-%d-%d", i, j)) }()
		}
		for range pods {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkAddress measures what the pod network adds to a WASM pod's
// start and end: SetupAddress (host-local ADD, the /32 on the address
// link) and Teardown (the address, host-local DEL), and the re-use of an
// address after an agent restart (the cached result, no plugin run).
func BenchmarkAddress(b *testing.B) {
	podnettest.Require(b)
	n, err := podnet.New(podnettest.Config(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("setup+teardown", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			uid := fmt.Sprintf("addr-%d", i)
			if _, err := n.SetupAddress(ctx, podnet.Pod{Namespace: "default", Name: uid, UID: uid}); err != nil {
				b.Fatal(err)
			}
			if err := n.Teardown(ctx, uid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reuse", func(b *testing.B) {
		p := podnet.Pod{Namespace: "default", Name: "reused-addr", UID: "reused-addr"}
		if _, err := n.SetupAddress(ctx, p); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			n2, err := podnet.New(n.Config())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := n2.SetupAddress(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
