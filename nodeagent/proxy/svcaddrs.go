package proxy

import (
	"fmt"
	"net"
)

// ServiceInterface is the dummy interface the agent puts ClusterIPs on by
// default (orca-agent --proxy-service-interface).
const ServiceInterface = "orca-svc0"

// needsAddr reports whether ClusterIP ip must be put on the service
// interface to be reachable: loopback addresses (127.0.0.0/8, ::1) are
// local already.
func needsAddr(ip string) bool {
	a := net.ParseIP(ip)
	return a != nil && !a.IsLoopback() && !a.IsUnspecified()
}

// parseCIDRs parses Config.ServiceCIDRs.
func parseCIDRs(cidrs []string) ([]*net.IPNet, error) {
	var out []*net.IPNet
	for _, c := range cidrs {
		_, n, err := net.ParseCIDR(c)
		if err != nil {
			return nil, fmt.Errorf("service CIDR %q: %w", c, err)
		}
		out = append(out, n)
	}
	return out, nil
}
