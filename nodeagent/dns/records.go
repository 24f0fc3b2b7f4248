package dns

import (
	"net"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/miekg/dns"
)

// view is what DNS knows of one Service, built from the Service and its
// EndpointSlices by rebuild; queries only read views.
type view struct {
	ns, name string
	// externalName is the CNAME target of a type ExternalName Service
	// (fully qualified, lower case), "" otherwise.
	externalName string
	// badExternalName: the Service's externalName is not a DNS-1123
	// subdomain (a stored object older than the API's check); its name
	// is answered SERVFAIL.
	badExternalName bool
	headless        bool
	clusterIPs      []net.IP
	ports           []port // the Service's ports (ClusterIP Services)
	// endpoints are the ready endpoints: records of headless Services,
	// and PTR names of every Service's endpoints (as CoreDNS).
	endpoints []endpoint
}

// port is one named or unnamed port, protocol lower case ("tcp").
type port struct {
	name, proto string
	port        uint16
}

// endpoint is one ready endpoint of a headless Service: its DNS label
// (the EndpointSlice endpoint's hostname, which the control plane sets
// from a Pod's spec.hostname when its spec.subdomain names the Service, or
// else its first address in dashed form, as CoreDNS's kubernetes plugin
// names endpoints), addresses and the ports of its EndpointSlice.
type endpoint struct {
	label string
	ips   []net.IP
	ports []port
}

// index holds the raw objects by Service key ("ns/name") and the views
// built from them.
type index struct {
	rawMu    sync.Mutex // guards svcs, slices and sliceSvc
	svcs     map[string]*corev1.Service
	slices   map[string]map[string]*discoveryv1.EndpointSlice // svc key -> slice name -> slice
	sliceSvc map[string]string                                // slice key -> svc key

	mu      sync.RWMutex // guards views, nsCount, ptr and ptrKeys
	views   map[string]*view
	nsCount map[string]int         // namespace -> Services with a view
	ptr     map[string][]string    // reverse name ("4.3.2.1.in-addr.arpa.") -> target names
	ptrKeys map[string][][2]string // svc key -> (reverse name, target) its view added
}

func newIndex() *index {
	return &index{
		svcs:     map[string]*corev1.Service{},
		slices:   map[string]map[string]*discoveryv1.EndpointSlice{},
		sliceSvc: map[string]string{},
		views:    map[string]*view{},
		nsCount:  map[string]int{},
		ptr:      map[string][]string{},
		ptrKeys:  map[string][][2]string{},
	}
}

// setService records Service key's object (nil: deleted).
func (x *index) setService(key string, svc *corev1.Service) {
	x.rawMu.Lock()
	defer x.rawMu.Unlock()
	if svc == nil {
		delete(x.svcs, key)
		return
	}
	x.svcs[key] = svc
}

// setSlice records sl (deleted: removed) and returns the Service keys to
// rebuild: the one it belongs to and, when its service-name label moved,
// the one it belonged to.
func (x *index) setSlice(sl *discoveryv1.EndpointSlice, deleted bool) []string {
	x.rawMu.Lock()
	defer x.rawMu.Unlock()
	skey := sl.Namespace + "/" + sl.Name
	var out []string
	if old, ok := x.sliceSvc[skey]; ok {
		delete(x.slices[old], sl.Name)
		if len(x.slices[old]) == 0 {
			delete(x.slices, old)
		}
		delete(x.sliceSvc, skey)
		out = append(out, old)
	}
	svcName := sl.Labels[discoveryv1.LabelServiceName]
	if deleted || svcName == "" {
		return out
	}
	key := sl.Namespace + "/" + svcName
	if x.slices[key] == nil {
		x.slices[key] = map[string]*discoveryv1.EndpointSlice{}
	}
	x.slices[key][sl.Name] = sl
	x.sliceSvc[skey] = key
	if len(out) == 0 || out[0] != key {
		out = append(out, key)
	}
	return out
}

// rebuild recomputes the view of Service key from the raw objects.
func (x *index) rebuild(key, zone string) {
	x.rawMu.Lock()
	svc := x.svcs[key]
	var slices []*discoveryv1.EndpointSlice
	for _, sl := range x.slices[key] {
		slices = append(slices, sl)
	}
	x.rawMu.Unlock()
	var v *view
	if svc != nil {
		v = x.buildView(svc, slices)
	}
	x.install(key, v, zone)
}

func (x *index) buildView(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) *view {
	v := &view{ns: strings.ToLower(svc.Namespace), name: strings.ToLower(svc.Name)}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		if svc.Spec.ExternalName == "" {
			return v
		}
		en := strings.ToLower(strings.TrimSuffix(svc.Spec.ExternalName, "."))
		// Kubernetes' ValidateService rule: a DNS-1123 subdomain (which
		// also bounds it to 253 characters, a name that fits a message).
		if len(validation.IsDNS1123Subdomain(en)) > 0 {
			v.badExternalName = true
			return v
		}
		v.externalName = en + "."
		return v
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		if ip := net.ParseIP(s); ip != nil {
			v.clusterIPs = append(v.clusterIPs, ip)
		}
	}
	if len(v.clusterIPs) == 0 {
		v.headless = true // clusterIP None (or not allocated yet)
	}
	for _, p := range svc.Spec.Ports {
		v.ports = append(v.ports, port{name: strings.ToLower(p.Name), proto: protoOf(p.Protocol), port: uint16(p.Port)})
	}
	sort.Slice(slices, func(i, j int) bool { return slices[i].Name < slices[j].Name })
	seen := map[string]bool{}
	for _, sl := range slices {
		var ports []port
		for _, p := range sl.Ports {
			if p.Port == nil {
				continue
			}
			pp := port{proto: "tcp", port: uint16(*p.Port)}
			if p.Name != nil {
				pp.name = strings.ToLower(*p.Name)
			}
			if p.Protocol != nil {
				pp.proto = protoOf(*p.Protocol)
			}
			ports = append(ports, pp)
		}
		for _, e := range sl.Endpoints {
			if !ready(e, svc.Spec.PublishNotReadyAddresses) {
				continue
			}
			ep := endpoint{ports: ports}
			for _, a := range e.Addresses {
				if ip := net.ParseIP(a); ip != nil {
					ep.ips = append(ep.ips, ip)
				}
			}
			if len(ep.ips) == 0 {
				continue
			}
			if e.Hostname != nil && *e.Hostname != "" && len(validation.IsDNS1123Label(strings.ToLower(*e.Hostname))) == 0 {
				ep.label = strings.ToLower(*e.Hostname)
			} else {
				ep.label = dashed(ep.ips[0])
			}
			if seen[ep.label+"|"+ep.ips[0].String()] {
				continue // the same endpoint in two slices
			}
			seen[ep.label+"|"+ep.ips[0].String()] = true
			v.endpoints = append(v.endpoints, ep)
		}
	}
	return v
}

// ready reports whether e is published: Ready (nil counts as true, as the
// EndpointSlice API says), or Serving for Services with
// publishNotReadyAddresses, as CoreDNS's kubernetes plugin.
func ready(e discoveryv1.Endpoint, publishNotReady bool) bool {
	c := e.Conditions
	if c.Ready == nil || *c.Ready {
		return true
	}
	return publishNotReady && (c.Serving == nil || *c.Serving)
}

// install replaces key's view (nil: removes it) and its PTR names.
// zone is the cluster domain, fully qualified and lower case.
func (x *index) install(key string, v *view, zone string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old := x.views[key]; old != nil {
		x.nsCount[old.ns]--
		if x.nsCount[old.ns] <= 0 {
			delete(x.nsCount, old.ns)
		}
	}
	for _, pr := range x.ptrKeys[key] {
		targets := x.ptr[pr[0]][:0:0]
		removed := false
		for _, t := range x.ptr[pr[0]] {
			if !removed && t == pr[1] {
				removed = true
				continue
			}
			targets = append(targets, t)
		}
		if len(targets) == 0 {
			delete(x.ptr, pr[0])
		} else {
			x.ptr[pr[0]] = targets
		}
	}
	delete(x.ptrKeys, key)
	if v == nil {
		delete(x.views, key)
		return
	}
	x.views[key] = v
	x.nsCount[v.ns]++
	base := v.name + "." + v.ns + ".svc." + zone
	var added [][2]string
	add := func(ip net.IP, target string) {
		r, err := dns.ReverseAddr(ip.String())
		if err != nil {
			return
		}
		x.ptr[r] = append(x.ptr[r], target)
		added = append(added, [2]string{r, target})
	}
	for _, ip := range v.clusterIPs {
		add(ip, base)
	}
	for _, e := range v.endpoints {
		for _, ip := range e.ips {
			add(ip, e.label+"."+base)
		}
	}
	x.ptrKeys[key] = added
}

func (x *index) view(ns, name string) *view {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.views[ns+"/"+name] // Service and namespace names are lower-case DNS labels
}

func (x *index) namespaceExists(ns string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.nsCount[ns] > 0
}

func (x *index) lookupPTR(name string) []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return append([]string(nil), x.ptr[name]...)
}

func protoOf(p corev1.Protocol) string {
	if p == "" {
		return "tcp"
	}
	return strings.ToLower(string(p))
}

// dashed is ip's DNS label form: 10-42-0-5, or for IPv6 the address with
// ':' as '-' (fd00--1), as CoreDNS's kubernetes plugin.
func dashed(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil {
		return strings.ReplaceAll(v4.String(), ".", "-")
	}
	return strings.ReplaceAll(ip.String(), ":", "-")
}

// undash parses a dashed label back to an IP; nil if it is none.
func undash(label string) net.IP {
	if strings.Count(label, "-") == 3 && !strings.Contains(label, ":") {
		if ip := net.ParseIP(strings.ReplaceAll(label, "-", ".")); ip != nil && ip.To4() != nil {
			return ip
		}
	}
	if ip := net.ParseIP(strings.ReplaceAll(label, "-", ":")); ip != nil && ip.To4() == nil {
		return ip
	}
	return nil
}
