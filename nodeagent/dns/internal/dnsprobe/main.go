// Command dnsprobe is the test workload of the agent's in-container DNS
// test: it resolves each argument through the Go resolver (the
// container's /etc/resolv.conf, its search domains and ndots), retrying
// each every 200 ms until it resolves, prints one line per answer and
// then sleeps until stopped. An argument is "host:<name>" (A/AAAA) or
// "srv:<service>:<proto>:<name>" (SRV _<service>._<proto>.<name>).
//
//	host web 10.43.0.10
//	srv web 80 web.default.svc.cluster.local.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"time"
)

func main() {
	for _, arg := range os.Args[1:] {
		for {
			out, err := resolve(arg)
			if err == nil {
				for _, l := range out {
					fmt.Println(l)
				}
				break
			}
			fmt.Fprintf(os.Stderr, "%s: %v\n", arg, err)
			time.Sleep(200 * time.Millisecond)
		}
	}
	fmt.Println("done")
	select {}
}

func resolve(arg string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	f := strings.Split(arg, ":")
	var out []string
	switch {
	case f[0] == "host" && len(f) == 2:
		addrs, err := net.DefaultResolver.LookupHost(ctx, f[1])
		if err != nil {
			return nil, err
		}
		sort.Strings(addrs)
		for _, a := range addrs {
			out = append(out, fmt.Sprintf("host %s %s", f[1], a))
		}
	case f[0] == "srv" && len(f) == 4:
		_, srvs, err := net.DefaultResolver.LookupSRV(ctx, f[1], f[2], f[3])
		if err != nil {
			return nil, err
		}
		for _, s := range srvs {
			out = append(out, fmt.Sprintf("srv %s %d %s", f[3], s.Port, s.Target))
		}
		sort.Strings(out)
	default:
		return nil, fmt.Errorf("bad argument %q", arg)
	}
	return out, nil
}
