// Command probe is a test workload that prints what a container or a WASM
// guest sees of its process and files, for the volume and security
// context tests. It builds natively (for a container image) and for
// GOOS=wasip1. It prints to stdout, one line each, in this order:
//
//	ids uid=<uid> gid=<gid> groups=<g1,g2>     with $PROBE_IDS set
//	status CapEff=<hex> NoNewPrivs=<0|1>       with $PROBE_IDS set (Linux)
//	cat <path>=<content, Go-quoted>            for each path in $PROBE_CAT
//	cat <path> error=<error>                   (comma-separated)
//	write <path>=ok | write <path> error=<err> for each path in $PROBE_WRITE
//	link <path>=ok | link <path> error=<err>   $PROBE_LINK=<target>,<path>: a symlink
//
// As a CGI program (GATEWAY_INTERFACE set: a WASM HTTP-model guest) it
// first writes a "Content-Type: text/plain" header, so the lines are the
// response's body.
//
// Then, with $PROBE_WATCH=<path>, prints "watch <path>=<content>" each
// time that file's content changes (polled every 50 ms) until stopped;
// without it, it exits 0.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if os.Getenv("GATEWAY_INTERFACE") != "" {
		fmt.Print("Content-Type: text/plain\r\n\r\n")
	}
	if os.Getenv("PROBE_IDS") != "" {
		var groups []string
		gs, _ := os.Getgroups()
		for _, g := range gs {
			groups = append(groups, strconv.Itoa(g))
		}
		fmt.Printf("ids uid=%d gid=%d groups=%s\n", os.Getuid(), os.Getgid(), strings.Join(groups, ","))
		if f, err := os.Open("/proc/self/status"); err == nil {
			fields := map[string]string{}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				k, v, _ := strings.Cut(sc.Text(), ":")
				fields[k] = strings.TrimSpace(v)
			}
			f.Close()
			fmt.Printf("status CapEff=%s NoNewPrivs=%s\n", fields["CapEff"], fields["NoNewPrivs"])
		}
	}
	for _, p := range list("PROBE_CAT") {
		b, err := os.ReadFile(p)
		if err != nil {
			fmt.Printf("cat %s error=%v\n", p, err)
			continue
		}
		fmt.Printf("cat %s=%q\n", p, b)
	}
	for _, p := range list("PROBE_WRITE") {
		if err := os.WriteFile(p, []byte("written by probe\n"), 0o644); err != nil {
			fmt.Printf("write %s error=%v\n", p, err)
			continue
		}
		fmt.Printf("write %s=ok\n", p)
	}
	if target, link, ok := strings.Cut(os.Getenv("PROBE_LINK"), ","); ok {
		if err := os.Symlink(target, link); err != nil {
			fmt.Printf("link %s error=%v\n", link, err)
		} else {
			fmt.Printf("link %s=ok\n", link)
		}
	}
	if p := os.Getenv("PROBE_WATCH"); p != "" {
		last := "\x00"
		for {
			b, err := os.ReadFile(p)
			s := string(b)
			if err != nil {
				s = "error=" + err.Error()
			}
			if s != last {
				fmt.Printf("watch %s=%q\n", p, s)
				last = s
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func list(env string) []string {
	v := os.Getenv(env)
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}
