package containerd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/orca-edge/orca/runtimes"
)

// Where a task's network files live on the node: DataDir/etc/<container ID>/.
const etcDirName = "etc"

// Paths of the node's resolver configuration: the one the node's own
// processes read, and systemd-resolved's list of upstream servers for
// when the former names only its local stub (127.0.0.53), which a pod
// cannot reach.
var (
	nodeResolvConf     = "/etc/resolv.conf"
	resolvedResolvConf = "/run/systemd/resolve/resolv.conf"
)

// etcDir is where the network files of container cid are written.
func (r *Runtime) etcDir(cid string) string { return filepath.Join(r.cfg.DataDir, etcDirName, cid) }

// withNetwork places the task in its network, as the CRI runtime does
// for a pod sandbox:
//   - HostNetwork: the node's network and UTS namespaces, the node's
//     hostname (HOSTNAME too) and its /etc/hosts and /etc/resolv.conf;
//   - otherwise the namespace at NetNSPath (the pod's, shared by its
//     containers), or a namespace of the task's own when NetNSPath is ""
//     (containerd's default), with /etc/hosts (localhost, and the pod's
//     IP with its hostname when PodIP is set, as the kubelet's managed
//     hosts file), /etc/hostname and /etc/resolv.conf (the node's
//     nameservers, search and options) written for it under DataDir and
//     bind-mounted over the image's.
func (r *Runtime) withNetwork(cid string, spec runtimes.TaskSpec) oci.SpecOpts {
	return func(ctx context.Context, client oci.Client, c *containers.Container, s *oci.Spec) error {
		if spec.HostNetwork {
			for _, ns := range []specs.LinuxNamespaceType{specs.NetworkNamespace, specs.UTSNamespace} {
				if err := oci.WithHostNamespace(ns)(ctx, client, c, s); err != nil {
					return err
				}
			}
			s.Hostname = "" // the node's: runc sets none outside a UTS namespace of its own
			if h, err := os.Hostname(); err == nil && s.Process != nil {
				for i, kv := range s.Process.Env {
					if kv == "HOSTNAME="+podHostname(spec) {
						s.Process.Env[i] = "HOSTNAME=" + h
					}
				}
			}
			if err := oci.WithHostHostsFile(ctx, client, c, s); err != nil {
				return err
			}
			if spec.ResolvConf != nil { // dnsPolicy ClusterFirstWithHostNet
				return r.bindNetworkFiles(cid, s, [][3]string{{"resolv.conf", "/etc/resolv.conf", string(spec.ResolvConf)}})
			}
			return oci.WithHostResolvconf(ctx, client, c, s)
		}
		if spec.NetNSPath != "" {
			if err := oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: spec.NetNSPath})(ctx, client, c, s); err != nil {
				return err
			}
		}
		resolv := spec.ResolvConf
		if resolv == nil {
			var err error
			if resolv, err = resolvConf(nodeResolvConf, resolvedResolvConf); err != nil {
				return err
			}
		}
		name := podHostname(spec)
		return r.bindNetworkFiles(cid, s, [][3]string{
			{"hosts", "/etc/hosts", string(hostsFile(spec.PodIP, name))},
			{"hostname", "/etc/hostname", name + "\n"},
			{"resolv.conf", "/etc/resolv.conf", string(resolv)},
		})
	}
}

// bindNetworkFiles writes files (name under etcDir, path in the
// container, content) and bind-mounts them into s.
func (r *Runtime) bindNetworkFiles(cid string, s *oci.Spec, files [][3]string) error {
	dir := r.etcDir(cid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("network files: %w", err)
	}
	for _, f := range files {
		p := filepath.Join(dir, f[0])
		if err := os.WriteFile(p, []byte(f[2]), 0o644); err != nil {
			return fmt.Errorf("network files: %w", err)
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: f[1], Type: "bind", Source: p, Options: []string{"rbind", "rprivate", "rw"}})
	}
	return nil
}

// hostsFile is the kubelet's managed hosts file (managedHostsFileContent)
// for a pod at ip ("" = none) with hostname name.
func hostsFile(ip, name string) []byte {
	var b bytes.Buffer
	b.WriteString("# Kubernetes-managed hosts file.\n")
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	if ip != "" {
		fmt.Fprintf(&b, "%s\t%s\n", ip, name)
	}
	return b.Bytes()
}

// resolvConf returns the resolver configuration of a pod with the node's
// DNS (the kubelet's DNSDefault policy): the nameserver, search and
// options lines of nodePath, or of resolvedPath when every nameserver of
// nodePath is on loopback (systemd-resolved's stub) and resolvedPath
// exists. A missing nodePath gives an empty file (no DNS), as the kubelet
// does without --resolv-conf.
func resolvConf(nodePath, resolvedPath string) ([]byte, error) {
	data, err := os.ReadFile(nodePath)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the node's %s: %w", nodePath, err)
	}
	lines, loopbackOnly := resolvLines(data)
	if loopbackOnly {
		if alt, err := os.ReadFile(resolvedPath); err == nil {
			lines, _ = resolvLines(alt)
		}
	}
	return []byte(strings.Join(lines, "\n") + "\n"), nil
}

// resolvLines keeps the nameserver, search, domain and options lines and
// reports whether it has nameservers and all are loopback addresses.
func resolvLines(data []byte) (lines []string, loopbackOnly bool) {
	var servers, loop int
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) > 1 {
				servers++
				if ip := net.ParseIP(f[1]); ip != nil && ip.IsLoopback() {
					loop++
				}
			}
		case "search", "domain", "options":
		default:
			continue
		}
		lines = append(lines, strings.Join(f, " "))
	}
	return lines, servers > 0 && loop == servers
}
