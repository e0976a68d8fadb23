//go:build linux

// Package link emulates the impairments of a link on one device of a
// network namespace, with eBPF at the device's TCX hooks, for kernels
// without netem: Delay (bpf/delay.c and a TUN forwarder in Go: fixed,
// jittered or per-flow delay without reordering a flow) and Loss (bpf/drop.c:
// random loss of UDP datagrams to one port). host/lab puts them on its nodes
// (Node.AddDelay, Node.AddLoss, DumbbellSpec.SenderDelays); any namespace
// that can run a function and hand out a netlink handle will do.
package link

import (
	"errors"
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
)

// tcxKernel is the first kernel with TCX, which both links attach with.
const tcxKernel = "6.6"

// ErrInvalidSpec is wrapped by the errors for a DelaySpec or LossSpec out of
// range.
var ErrInvalidSpec = errors.New("invalid link spec")

func specErr(field, format string, args ...any) error {
	return fmt.Errorf("link: %w: %s: %s", ErrInvalidSpec, field, fmt.Sprintf(format, args...))
}

// Netns is the network namespace a link's device is in. A host/lab Node is
// one.
type Netns interface {
	// Do runs fn on a locked OS thread inside the namespace.
	Do(fn func() error) error
	// Netlink returns a handle whose sockets live in the namespace, valid
	// for as long as the links in it.
	Netlink() *netlink.Handle
}

// disableIPv6 turns IPv6 off on dev in ns, if the kernel has IPv6 at all.
// /proc/sys/net shows the namespace of the thread that opens it.
func disableIPv6(ns Netns, dev string) error {
	path := "/proc/sys/net/ipv6/conf/" + dev + "/disable_ipv6"
	return ns.Do(func() error {
		f, err := os.OpenFile(path, os.O_WRONLY, 0) // no O_CREATE: absent means no IPv6
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err == nil {
			_, err = f.WriteString("1")
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			return fmt.Errorf("sysctl net.ipv6.conf.%s.disable_ipv6=1: %w", dev, err)
		}
		return nil
	})
}
