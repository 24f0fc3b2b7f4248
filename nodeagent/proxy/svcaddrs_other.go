//go:build !linux

package proxy

import (
	"errors"
	"net"
)

// svcAddrs is Linux only: elsewhere ClusterIPs must be local already.
type svcAddrs struct{ name string }

func newSvcAddrs(name string) *svcAddrs { return &svcAddrs{name: name} }

func (s *svcAddrs) ensureLink() error {
	return errors.New("service interface " + s.name + ": dummy links need Linux")
}
func (s *svcAddrs) add(string) error                                      { return nil }
func (s *svcAddrs) remove(string) error                                   { return nil }
func (s *svcAddrs) prune(map[string]bool, []*net.IPNet) ([]string, error) { return nil, nil }
