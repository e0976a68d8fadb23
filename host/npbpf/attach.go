package npbpf

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/fabriclab/fabriclab/qdisc/dispatch"
	"github.com/fabriclab/fabriclab/qdisc/nsexec"
	"github.com/vishvananda/netns"
)

// tcxKernel is the first kernel with TCX, which the NP attaches with.
const tcxKernel = "6.6"

// Options configure Attach.
type Options struct {
	// Mark is LoadOptions.Mark. Optional.
	Mark uint32
	// XmitTimeout is LoadOptions.XmitTimeout. Optional.
	XmitTimeout time.Duration
	// NoXmitHook leaves the transmit hook out: N then counts from the CNP
	// leaving the egress program, and no program runs for every packet
	// the machine sends. Optional.
	NoXmitHook bool
	// IngressFirst attaches the ingress program first in the device's
	// TCX ingress chain instead of last. Last (the default), it sees the
	// CE marks the programs before it set — a switch port's departure
	// AQMs (TCN, CoDel, ECN♯) mark at its peer's ingress, which is this
	// device when the receiver is the port's peer — as long as they pass
	// packets on with TC_ACT_UNSPEC (TCX_NEXT), as the project's do.
	// First, no program's TC_ACT_OK can hide a packet from it, and it
	// misses those marks. Optional.
	IngressFirst bool
}

// NP is the notification point attached to one device: np_egress first in
// its TCX egress chain, np_ingress in its ingress chain, np_xmit at the
// net_dev_start_xmit tracepoint. It implements NPOffload.
type NP struct {
	*Objects
	// Dev and Ifindex name the device, in its namespace.
	Dev     string
	Ifindex int
	// XmitHookErr is why np_xmit is not attached (Options.NoXmitHook, or
	// the tracing link failed); nil when it is. Without it N counts from
	// the CNP leaving np_egress.
	XmitHookErr error

	mu     sync.Mutex
	links  []link.Link // [the transmit hook,] egress, then ingress
	closed bool
	// dispatched is np_xmit's device in the xmit dispatcher, nil when it
	// is not dispatched.
	dispatched *dispatch.Device
}

// errNoXmitHook is XmitHookErr with Options.NoXmitHook.
var errNoXmitHook = errors.New("npbpf: transmit hook left out (Options.NoXmitHook)")

// Attach loads the programs and attaches them to dev in namespace ns
// (netns.None() for the calling thread's). dev must carry Ethernet
// frames. Close detaches them.
func Attach(ns netns.NsHandle, dev string, opts Options) (*NP, error) {
	objs, err := Load(LoadOptions{Mark: opts.Mark, XmitTimeout: opts.XmitTimeout})
	if err != nil {
		return nil, err
	}
	np := &NP{Objects: objs, Dev: dev, XmitHookErr: errNoXmitHook}
	var ino uint32
	err = nsexec.Do(ns, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		if len(ifi.HardwareAddr) != 6 {
			return fmt.Errorf("%s has no Ethernet address (%q): the CNP swaps the data packet's Ethernet addresses", dev, ifi.HardwareAddr)
		}
		np.Ifindex = ifi.Index
		if ino, err = nsexec.Ino(netns.None()); err != nil {
			return err
		}
		// Egress first: a clone must never find the egress hook without
		// the program that turns it into a CNP.
		if err := np.attach(objs.objs.Egress, ebpf.AttachTCXEgress, link.Head()); err != nil {
			return fmt.Errorf("attach np_egress: %w", err)
		}
		anchor := link.Tail()
		if opts.IngressFirst {
			anchor = link.Head()
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
	if !opts.NoXmitHook {
		// np_egress counts from a CNP's build until xmit_hook is set,
		// which attachXmit does last.
		np.XmitHookErr = np.attachXmit(dispatch.Device{NetnsIno: ino, Ifindex: np.Ifindex})
	}
	return np, nil
}

// attachXmit hooks np_xmit to the machine's xmit dispatcher
// (qdisc/dispatch: one program on net_dev_start_xmit runs it for dev's
// transmissions alone, held by np_egress's link) and tells np_egress so.
// Where the dispatcher cannot be had (no shared bpffs), np_xmit goes on
// the tracepoint itself, for every device of every namespace (np_xmits
// tells this object's CNPs apart).
func (np *NP) attachXmit(dev dispatch.Device) error {
	var owner link.ID
	if len(np.links) > 0 {
		if info, err := np.links[0].Info(); err == nil {
			owner = info.ID
		}
	}
	var undo func() error
	if owner != 0 && dispatch.NP(np.objs.Xmit, dev, owner) == nil {
		np.dispatched = &dev
		undo = np.undispatch
	} else {
		l, err := link.AttachTracing(link.TracingOptions{Program: np.objs.Xmit})
		if err != nil {
			return fmt.Errorf("npbpf: attach np_xmit to net_dev_start_xmit: %w", err)
		}
		np.links = append([]link.Link{l}, np.links...)
		undo = func() error { return nil }
	}
	if err := np.objs.XmitHook.Set(uint8(1)); err != nil {
		return errors.Join(fmt.Errorf("npbpf: set xmit_hook: %w", err), undo())
	}
	return nil
}

// XmitDispatched reports whether np_xmit runs from the machine's xmit
// dispatcher (for this device's transmissions alone) rather than on the
// tracepoint itself.
func (np *NP) XmitDispatched() bool {
	np.mu.Lock()
	defer np.mu.Unlock()
	return np.dispatched != nil
}

// undispatch frees np_xmit's slot of the dispatcher.
func (np *NP) undispatch() error {
	if np.dispatched == nil {
		return nil
	}
	var ids []link.ID
	for _, l := range np.links {
		if info, err := l.Info(); err == nil {
			ids = append(ids, info.ID)
		}
	}
	err := dispatch.UndoNP(*np.dispatched, ids)
	np.dispatched = nil
	return err
}

func (np *NP) attach(prog *ebpf.Program, where ebpf.AttachType, anchor link.Anchor) error {
	l, err := link.AttachTCX(link.TCXOptions{Interface: np.Ifindex, Program: prog, Attach: where, Anchor: anchor})
	if err != nil {
		return err
	}
	np.links = append(np.links, l)
	return nil
}

// LinkIDs lists the kernel IDs of the links holding the programs
// (bpftool link show id N): the transmit hook's if attached, np_egress's,
// np_ingress's. Empty once closed.
func (np *NP) LinkIDs() ([]link.ID, error) {
	np.mu.Lock()
	defer np.mu.Unlock()
	var ids []link.ID
	for _, l := range np.links {
		info, err := l.Info()
		if err != nil {
			return nil, fmt.Errorf("npbpf: link info: %w", err)
		}
		ids = append(ids, info.ID)
	}
	return ids, nil
}

// Close detaches the programs (ingress first, so no clone is made once the
// egress program is gone; the transmit hook last) and frees them. It is
// idempotent.
func (np *NP) Close() error {
	np.mu.Lock()
	defer np.mu.Unlock()
	if np.closed {
		return nil
	}
	np.closed = true
	// Out of the dispatcher while the link that holds the slot lives.
	errs := []error{np.undispatch()}
	for i := len(np.links) - 1; i >= 0; i-- {
		errs = append(errs, np.links[i].Close())
	}
	np.links = nil
	errs = append(errs, np.Objects.Close())
	return errors.Join(errs...)
}
