//go:build linux

package link

import (
	"errors"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
)

// What the external tests (package link_test, which builds labs with
// host/lab) need of the links' insides.

// TCXKernel is the first kernel with TCX.
const TCXKernel = tcxKernel

// Programs are the delay link's two programs, for their IDs.
func (d *Delay) Programs() []*ebpf.Program {
	return []*ebpf.Program{d.objs.DelayDivert, d.objs.DelayReturn}
}

// Closed reports whether Close has begun.
func (d *Delay) Closed() bool { return d.closing.Load() }

// TunExists reports whether the delay link's TUN is still in the namespace.
func (d *Delay) TunExists() (bool, error) {
	_, err := d.nl.LinkByName(d.tunName)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return false, nil
	}
	return err == nil, err
}
