package containerd

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orca-edge/orca/runtimes"
)

// forwarder owns a task's port listeners on the node and forwards each
// accepted connection to PodIP:ContainerPort, or without a pod IP to
// 127.0.0.1:ContainerPort in the task's network namespace. A nil
// *forwarder has no ports; one without listeners (direct) only reports
// the bindings of a task in the node's network.
type forwarder struct {
	ports []runtimes.PortBinding
	lns   []net.Listener

	stopped chan struct{} // closed by close

	mu     sync.Mutex
	closed bool // mu must be held
	conns  map[net.Conn]struct{}
}

func newForwarder() *forwarder {
	return &forwarder{conns: map[net.Conn]struct{}{}, stopped: make(chan struct{})}
}

// listenFor returns the forwarder of spec's ports: direct ones for a
// HostNetwork task, else listen's. A task with a pod IP (the agent's pod
// network) is reached at PodIP:ContainerPort: only its ports with a
// HostPort are listened for on the node, as the kubelet's hostPort.
func listenFor(spec runtimes.TaskSpec) (*forwarder, error) {
	if spec.HostNetwork {
		return direct(spec.Ports), nil
	}
	if spec.PodIP != "" {
		var ports []runtimes.Port
		for _, p := range spec.Ports {
			if p.HostPort != 0 {
				ports = append(ports, p)
			}
		}
		return listen(ports)
	}
	return listen(spec.Ports)
}

// direct reports ports as a task in the node's network serves them: at
// HostPort = ContainerPort, on HostIP (default 0.0.0.0), any protocol,
// with no listener of the runtime's.
func direct(ports []runtimes.Port) *forwarder {
	if len(ports) == 0 {
		return nil
	}
	f := newForwarder()
	for _, p := range ports {
		proto, hostIP := p.Protocol, p.HostIP
		if proto == "" {
			proto = "TCP"
		}
		if hostIP == "" {
			hostIP = "0.0.0.0"
		}
		f.ports = append(f.ports, runtimes.PortBinding{ContainerPort: p.ContainerPort, Protocol: proto, HostIP: hostIP, HostPort: p.ContainerPort})
	}
	return f
}

// listen opens a listener for each port (TCP only). A HostPort of 0 picks
// a free port.
func listen(ports []runtimes.Port) (*forwarder, error) {
	if len(ports) == 0 {
		return nil, nil
	}
	f := newForwarder()
	for _, p := range ports {
		if p.Protocol != "" && p.Protocol != "TCP" {
			f.close()
			return nil, fmt.Errorf("port %d/%s: the containerd runtime forwards TCP ports only", p.ContainerPort, p.Protocol)
		}
		addr := net.JoinHostPort(p.HostIP, strconv.Itoa(int(p.HostPort)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			f.close()
			return nil, fmt.Errorf("listen for containerPort %d on %s: %w", p.ContainerPort, addr, err)
		}
		hostIP := p.HostIP
		if hostIP == "" {
			hostIP = "0.0.0.0"
		}
		f.lns = append(f.lns, ln)
		f.ports = append(f.ports, runtimes.PortBinding{ContainerPort: p.ContainerPort, Protocol: "TCP",
			HostIP: hostIP, HostPort: int32(ln.Addr().(*net.TCPAddr).Port)})
	}
	return f, nil
}

// relisten opens listeners on the bindings a previous agent had
// (Recover); a port it cannot have again is left out, with an error.
func relisten(bindings []runtimes.PortBinding) (*forwarder, error) {
	if len(bindings) == 0 {
		return nil, nil
	}
	f := newForwarder()
	var errs []error
	for _, b := range bindings {
		addr := net.JoinHostPort(b.HostIP, strconv.Itoa(int(b.HostPort)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("listen again for containerPort %d on %s: %w", b.ContainerPort, addr, err))
			continue
		}
		f.lns = append(f.lns, ln)
		f.ports = append(f.ports, b)
	}
	if len(errs) > 0 {
		return f, fmt.Errorf("%v", errs)
	}
	return f, nil
}

func (f *forwarder) bindings() []runtimes.PortBinding {
	if f == nil {
		return nil
	}
	return append([]runtimes.PortBinding(nil), f.ports...)
}

// netnsPath is the network namespace of the process pid.
func netnsPath(pid uint32) string { return fmt.Sprintf("/proc/%d/ns/net", pid) }

// serve accepts connections until close or ctx ends and forwards them to
// podIP, or when podIP is "" into the namespace at nsPath. The namespace
// file is opened now, so the forwarder keeps reaching the same namespace;
// it is closed once every accept loop and connection has ended.
func (f *forwarder) serve(ctx context.Context, nsPath, podIP string) {
	if f == nil || len(f.lns) == 0 {
		return
	}
	var ns *os.File // nil: connections go to podIP from the node
	if podIP == "" {
		var err error
		if ns, err = os.Open(nsPath); err != nil {
			f.close()
			return
		}
	}
	var wg sync.WaitGroup
	for i, ln := range f.lns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.accept(ctx, ln, ns, podIP, f.ports[i].ContainerPort, &wg)
		}()
	}
	go func() {
		select {
		case <-ctx.Done():
			f.close()
		case <-f.stopped:
		}
	}()
	go func() {
		wg.Wait()
		if ns != nil {
			ns.Close()
		}
	}()
}

func (f *forwarder) accept(ctx context.Context, ln net.Listener, ns *os.File, podIP string, port int32, wg *sync.WaitGroup) {
	dial := func() (net.Conn, error) {
		return dialInNetns(ctx, ns, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	}
	if podIP != "" {
		target := net.JoinHostPort(podIP, strconv.Itoa(int(port)))
		dial = func() (net.Conn, error) {
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return (&net.Dialer{}).DialContext(dctx, "tcp", target)
		}
	}
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		if !f.track(in) {
			in.Close()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer f.untrack(in)
			out, err := dial()
			if err != nil {
				return // the client sees the connection closed, as a refused one
			}
			if !f.track(out) {
				out.Close()
				return
			}
			defer f.untrack(out)
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				io.Copy(dst, src)
				if c, ok := dst.(*net.TCPConn); ok {
					c.CloseWrite()
				}
				done <- struct{}{}
			}
			go pipe(out, in)
			go pipe(in, out)
			<-done
			<-done
		}()
	}
}

func (f *forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *forwarder) untrack(c net.Conn) {
	c.Close()
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

// close closes the listeners and every forwarded connection.
func (f *forwarder) close() {
	if f == nil {
		return
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	close(f.stopped)
	conns := f.conns
	f.conns = map[net.Conn]struct{}{}
	f.mu.Unlock()
	for _, ln := range f.lns {
		ln.Close()
	}
	for c := range conns {
		c.Close()
	}
}

// dialInNetns connects to addr (an IP literal and port) from inside the
// network namespace ns: the socket is created on an OS thread switched
// into ns, and belongs to ns for its whole life. The thread is switched
// back, or discarded when it cannot be.
func dialInNetns(ctx context.Context, ns *os.File, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer self.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("enter network namespace: %w", err)}
			return
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := (&net.Dialer{}).DialContext(dctx, "tcp", addr)
		cancel()
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else the goroutine ends locked, and Go ends its thread
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
