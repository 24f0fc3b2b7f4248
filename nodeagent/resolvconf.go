package nodeagent

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/runtimes"
)

// Limits of a pod's resolver configuration, as the kubelet's
// formDNSConfigFitsLimits applies them (k8s.io/kubernetes
// pkg/apis/core/validation MaxDNSNameservers, MaxDNSSearchPaths and
// MaxDNSSearchListChars since ExpandedDNSConfig, GA in 1.28; glibc
// aborts on a search domain over 253 characters).
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
	maxDNSSearchLength    = 253
)

// systemdResolvConf lists systemd-resolved's upstream servers: the
// node's resolv.conf when /etc/resolv.conf names only its loopback stub
// (127.0.0.53), which a pod cannot reach, as k3s picks it for the kubelet.
var systemdResolvConf = "/run/systemd/resolve/resolv.conf"

// dnsConfig is a pod's resolver configuration.
type dnsConfig struct {
	servers, searches, options []string
}

// resolvConf renders c as the file a container sees at /etc/resolv.conf:
// search, nameserver and options lines, as containerd's CRI writes it.
func (c dnsConfig) resolvConf() []byte {
	var b bytes.Buffer
	if len(c.searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(c.searches, " "))
	}
	for _, s := range c.servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(c.options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(c.options, " "))
	}
	return append([]byte{}, b.Bytes()...) // not nil, also when empty
}

// podResolvConf returns the /etc/resolv.conf of pod's containers (see
// podDNS) and, when limits cut it, a warning for a DNSConfigForming event.
// An unreadable (not missing) node resolv.conf is an error.
func (a *Agent) podResolvConf(pod *corev1.Pod) ([]byte, string, error) {
	host, err := readHostDNS(a.cfg.ResolvConf)
	if err != nil {
		return nil, "", err
	}
	c, warn := podDNS(pod, host, a.cfg.ClusterDNS, a.cfg.ClusterDomain)
	return c.resolvConf(), warn, nil
}

// podDNS forms pod's resolver configuration as the kubelet's
// dns.Configurer.GetPodDNS (pkg/kubelet/network/dns):
//
//   - dnsPolicy ClusterFirst (the default) for a pod off the host network,
//     and ClusterFirstWithHostNet for any pod: nameservers clusterDNS,
//     search <ns>.svc.<domain> svc.<domain> <domain> followed by the
//     node's search domains, options ndots:5. Without clusterDNS such
//     pods get the node's configuration, as the kubelet's.
//   - Default, and ClusterFirst on the host network: the node's
//     nameservers, search domains and options (host).
//   - None: nothing but dnsConfig.
//
// spec.dnsConfig is then merged in: its nameservers and searches
// appended without duplicates, its options replacing those of the same
// name (sorted by name here; the kubelet's order is a map's). Past the
// limits, nameservers are cut to 3 and search domains to 32 and 2048
// characters (domains over 253 characters dropped), with a warning
// saying so.
func podDNS(pod *corev1.Pod, host dnsConfig, clusterDNS []string, clusterDomain string) (dnsConfig, string) {
	var c dnsConfig
	cluster := false
	switch pod.Spec.DNSPolicy {
	case corev1.DNSNone:
	case corev1.DNSClusterFirstWithHostNet:
		cluster = true
	case corev1.DNSDefault:
		c = host
	default: // ClusterFirst
		cluster = !pod.Spec.HostNetwork
		if !cluster {
			c = host
		}
	}
	if cluster {
		if len(clusterDNS) == 0 {
			c = host
		} else {
			c.servers = append([]string(nil), clusterDNS...)
			c.searches = host.searches
			if clusterDomain != "" {
				c.searches = omitDuplicates(append([]string{
					pod.Namespace + ".svc." + clusterDomain, "svc." + clusterDomain, clusterDomain}, host.searches...))
			}
			c.options = []string{"ndots:5"}
		}
	}
	c.servers = append([]string(nil), c.servers...)
	c.searches = append([]string(nil), c.searches...)
	c.options = append([]string(nil), c.options...)
	if dc := pod.Spec.DNSConfig; dc != nil {
		c.servers = omitDuplicates(append(c.servers, dc.Nameservers...))
		c.searches = omitDuplicates(append(c.searches, dc.Searches...))
		c.options = mergeDNSOptions(c.options, dc.Options)
	}
	var warn []string
	if len(c.servers) > maxDNSNameservers {
		c.servers = c.servers[:maxDNSNameservers]
		warn = append(warn, fmt.Sprintf("Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: %s", strings.Join(c.servers, " ")))
	}
	if s, cut := fitSearch(c.searches); cut {
		c.searches = s
		warn = append(warn, fmt.Sprintf("Search Line limits were exceeded, some search paths have been omitted, the applied search line is: %s", strings.Join(s, " ")))
	}
	return c, strings.Join(warn, "; ")
}

// fitSearch applies the search limits as the kubelet's
// formDNSSearchFitsLimits.
func fitSearch(s []string) ([]string, bool) {
	cut := false
	if len(s) > maxDNSSearchPaths {
		s, cut = s[:maxDNSSearchPaths], true
	}
	out := s[:0:0]
	for _, d := range s {
		if len(d) > maxDNSSearchLength {
			cut = true
			continue
		}
		out = append(out, d)
	}
	for len(out) > 0 && len(strings.Join(out, " ")) > maxDNSSearchListChars {
		out, cut = out[:len(out)-1], true
	}
	return out, cut
}

func omitDuplicates(s []string) []string {
	seen := map[string]bool{}
	out := s[:0:0]
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// mergeDNSOptions merges pod's dnsConfig options into existing ones
// ("name" or "name:value"), a pod option replacing one of its name, as
// the kubelet's mergeDNSOptions; the result is sorted by name.
func mergeDNSOptions(existing []string, opts []corev1.PodDNSConfigOption) []string {
	m := map[string]string{}
	for _, o := range existing {
		k, v, _ := strings.Cut(o, ":")
		m[k] = v
	}
	for _, o := range opts {
		v := ""
		if o.Value != nil {
			v = *o.Value
		}
		m[o.Name] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		if v != "" {
			k += ":" + v
		}
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// readHostDNS reads the node's resolver configuration from path as the
// kubelet's parseResolvConf: nameservers, the last search (or domain)
// line's domains without trailing dots, and options. When every
// nameserver of path is a loopback address (systemd-resolved's stub) and
// systemdResolvConf exists, that file is read instead. A missing path is
// an empty configuration.
func readHostDNS(path string) (dnsConfig, error) {
	c, err := parseResolvConf(path)
	if err != nil {
		return dnsConfig{}, err
	}
	loop := 0
	for _, s := range c.servers {
		if ip := net.ParseIP(s); ip != nil && ip.IsLoopback() {
			loop++
		}
	}
	if len(c.servers) > 0 && loop == len(c.servers) {
		if alt, err := parseResolvConf(systemdResolvConf); err == nil && len(alt.servers) > 0 {
			return alt, nil
		}
	}
	return c, nil
}

func parseResolvConf(path string) (dnsConfig, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return dnsConfig{}, nil
	}
	if err != nil {
		return dnsConfig{}, fmt.Errorf("read the node's resolv.conf %s: %w", path, err)
	}
	var c dnsConfig
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			c.servers = append(c.servers, f[1])
		case "search", "domain":
			c.searches = nil
			for _, s := range f[1:] {
				if s != "." {
					c.searches = append(c.searches, strings.TrimSuffix(s, "."))
				}
			}
		case "options":
			c.options = append(c.options, f[1:]...)
		}
	}
	return c, nil
}

// dnsSpec sets spec.ResolvConf for container c of w's pod; a limit cut
// is said in a Warning event DNSConfigForming, as the kubelet's.
func (w *podWorker) dnsSpec(c *container, spec *runtimes.TaskSpec) error {
	data, warn, err := w.a.podResolvConf(w.pod)
	if err != nil {
		return fmt.Errorf("resolv.conf of pod %s/%s: %w", w.ns, w.name, err)
	}
	if warn != "" {
		w.event(c, corev1.EventTypeWarning, "DNSConfigForming", warn)
	}
	spec.ResolvConf = data
	return nil
}

// defaultClusterDNS is Config.ClusterDNS's default for a DNS server
// listening on listen ("host:port"): its host, unless a pod could not
// reach it there (loopback, unspecified or not an IP): then none.
func defaultClusterDNS(listen string) []string {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsLoopback() || ip.IsUnspecified() {
		return nil
	}
	return []string{ip.String()}
}
