package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/orca-edge/orca/controlplane/apiserver"
	"github.com/orca-edge/orca/controlplane/controllers/kubernetesservice"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// advertiseAddress returns the address and port the `kubernetes` Service's
// endpoints name: --advertise-address when set, else the host of
// --apiserver-addr, else (listening on all addresses) the address of the
// host's default-route interface, as kube-apiserver's
// (utilnet.ChooseHostInterface), and the port of --apiserver-addr.
func advertiseAddress(flag, apiAddr string) (netip.Addr, int32, error) {
	host, portStr, err := net.SplitHostPort(apiAddr)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("--apiserver-addr %q: %w", apiAddr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return netip.Addr{}, 0, fmt.Errorf("--apiserver-addr %q: bad port", apiAddr)
	}
	if flag != "" {
		a, err := netip.ParseAddr(flag)
		if err != nil || a.IsUnspecified() {
			return netip.Addr{}, 0, fmt.Errorf("--advertise-address %q: want an IP address", flag)
		}
		return a.Unmap(), int32(port), nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if !a.IsUnspecified() {
			return a.Unmap(), int32(port), nil
		}
	} else if host != "" {
		ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip4", host)
		if err != nil || len(ips) == 0 {
			return netip.Addr{}, 0, fmt.Errorf("--apiserver-addr %q: cannot resolve %s for the kubernetes Service (set --advertise-address): %v", apiAddr, host, err)
		}
		return ips[0].Unmap(), int32(port), nil
	}
	ip, err := utilnet.ChooseHostInterface()
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("no address to advertise for the kubernetes Service (set --advertise-address): %w", err)
	}
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap(), int32(port), nil
}

// kubernetesServiceReconciler returns the reconciler of the `kubernetes`
// Service for o (nil error and nil reconciler never happen).
func kubernetesServiceReconciler(o options, st *store.Store, reg *registry.Registry, informers *store.SharedInformers) (*kubernetesservice.Reconciler, error) {
	clusterIP, err := apiserver.KubernetesServiceIP(o.serviceCIDR)
	if err != nil {
		return nil, fmt.Errorf("--service-cidr: %w", err)
	}
	addr, port, err := advertiseAddress(o.advertiseAddress, o.apiAddr)
	if err != nil {
		return nil, err
	}
	return kubernetesservice.New(kubernetesservice.Config{Store: st, Registry: reg, ClusterIP: clusterIP, Address: addr, SecurePort: port, Informers: informers})
}
