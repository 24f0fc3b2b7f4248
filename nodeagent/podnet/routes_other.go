//go:build !linux

package podnet

import (
	"errors"
	"net"
)

type netlinkState struct{}

func openNetlink(string) (*netlinkState, error) {
	return nil, errors.New("pod network routes need Linux (netlink)")
}

func (*netlinkState) close() {}

func (*Routes) apply(*net.IPNet, []peer) error { return errNotLinux }
