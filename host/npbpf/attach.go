package npbpf

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

// tcxKernel is the first kernel with TCX, which the NP attaches with.
const tcxKernel = "6.6"

// Options configure Attach.
type Options struct {
	// Mark is LoadOptions.Mark. Optional.
	Mark uint32
	// IngressLast attaches the ingress program last in the device's TCX
	// ingress chain instead of first. Last, it sees CE marks a program
	// before it sets (a port's dequeue AQM on this device), but only if
	// every program before it returns TC_ACT_UNSPEC (TCX_NEXT): one that
	// returns TC_ACT_OK ends the chain. First, it sees every packet and
	// passes it on with TC_ACT_UNSPEC. Optional.
	IngressLast bool
}

// NP is the notification point attached to one device: np_egress first in
// its TCX egress chain, np_ingress in its ingress chain. It implements
// NPOffload.
type NP struct {
	*Objects
	// Dev and Ifindex name the device, in its namespace.
	Dev     string
	Ifindex int

	mu     sync.Mutex
	links  []link.Link // egress, then ingress
	closed bool
}

// Attach loads the programs and attaches them to dev in namespace ns
// (netns.None() for the calling thread's). dev must carry Ethernet
// frames. Close detaches them.
func Attach(ns netns.NsHandle, dev string, opts Options) (*NP, error) {
	objs, err := Load(LoadOptions{Mark: opts.Mark})
	if err != nil {
		return nil, err
	}
	np := &NP{Objects: objs, Dev: dev}
	err = nsexec.Do(ns, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		if len(ifi.HardwareAddr) != 6 {
			return fmt.Errorf("%s has no Ethernet address (%q): the CNP swaps the data packet's Ethernet addresses", dev, ifi.HardwareAddr)
		}
		np.Ifindex = ifi.Index
		// Egress first: a clone must never find the egress hook without
		// the program that turns it into a CNP.
		if err := np.attach(objs.objs.Egress, ebpf.AttachTCXEgress, link.Head()); err != nil {
			return fmt.Errorf("attach np_egress: %w", err)
		}
		anchor := link.Head()
		if opts.IngressLast {
			anchor = link.Tail()
		}
		if err := np.attach(objs.objs.Ingress, ebpf.AttachTCXIngress, anchor); err != nil {
			return fmt.Errorf("attach np_ingress: %w", err)
		}
		return nil
	})
	if err != nil {
		if cerr := np.Close(); cerr != nil {
			err = fmt.Errorf("%w (cleanup: %v)", err, cerr)
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			err = fmt.Errorf("%w (the NP needs TCX, kernel >= %s)", err, tcxKernel)
		}
		return nil, fmt.Errorf("npbpf: attach to %s: %w", dev, err)
	}
	return np, nil
}

func (np *NP) attach(prog *ebpf.Program, where ebpf.AttachType, anchor link.Anchor) error {
	l, err := link.AttachTCX(link.TCXOptions{Interface: np.Ifindex, Program: prog, Attach: where, Anchor: anchor})
	if err != nil {
		return err
	}
	np.links = append(np.links, l)
	return nil
}

// Close detaches the programs (ingress first, so no clone is made once the
// egress program is gone) and frees them. It is idempotent.
func (np *NP) Close() error {
	np.mu.Lock()
	defer np.mu.Unlock()
	if np.closed {
		return nil
	}
	np.closed = true
	var errs []error
	for i := len(np.links) - 1; i >= 0; i-- {
		errs = append(errs, np.links[i].Close())
	}
	np.links = nil
	errs = append(errs, np.Objects.Close())
	return errors.Join(errs...)
}
