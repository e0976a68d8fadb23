package rpbpf

import (
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/fabriclab/fabriclab/qdisc/nsexec"
	"github.com/vishvananda/netns"
)

// tcxKernel is the first kernel with TCX, which the RP attaches with.
const tcxKernel = "6.6"

// RP is the CNP intake attached to devices of one namespace: a QP's CNPs
// may arrive on any of them. One program and one set of maps serve them
// all. It implements Offload.
type RP struct {
	*Objects
	// Devs names the devices, in their namespace.
	Devs []string

	mu     sync.Mutex
	links  []link.Link
	closed bool
}

var _ Offload = (*RP)(nil)

// Attach loads the program with opts and attaches it first in the TCX
// ingress chain of each of devs in namespace ns (netns.None() for the
// calling thread's). It passes every packet on. On error nothing stays
// attached.
func Attach(ns netns.NsHandle, devs []string, opts LoadOptions) (*RP, error) {
	if len(devs) == 0 {
		return nil, errors.New("rpbpf: attach: no device")
	}
	objs, err := Load(opts)
	if err != nil {
		return nil, err
	}
	rp := &RP{Objects: objs, Devs: devs}
	err = nsexec.Do(ns, func() error {
		for _, dev := range devs {
			ifi, err := net.InterfaceByName(dev)
			if err != nil {
				return err
			}
			l, err := link.AttachTCX(link.TCXOptions{
				Interface: ifi.Index, Program: objs.program(), Attach: ebpf.AttachTCXIngress, Anchor: link.Head(),
			})
			if err != nil {
				return fmt.Errorf("attach rp_ingress to %s: %w", dev, err)
			}
			rp.links = append(rp.links, l)
		}
		return nil
	})
	if err != nil {
		if cerr := rp.Close(); cerr != nil {
			err = fmt.Errorf("%w (cleanup: %v)", err, cerr)
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			err = fmt.Errorf("%w (the RP needs TCX, kernel >= %s)", err, tcxKernel)
		}
		return nil, fmt.Errorf("rpbpf: %w", err)
	}
	return rp, nil
}

// Close detaches the program and frees it. It is idempotent.
func (rp *RP) Close() error {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.closed {
		return nil
	}
	rp.closed = true
	var errs []error
	for _, l := range rp.links {
		errs = append(errs, l.Close())
	}
	rp.links = nil
	return errors.Join(append(errs, rp.Objects.Close())...)
}
