package rpbpf

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/qdisc/nsexec"
)

// tcxKernel is the first kernel with TCX, which the RP attaches with.
const tcxKernel = "6.6"

// RP is one host's hold on the CNP intake attached to devices of its
// namespace: a QP's CNPs may arrive on any of them. The hosts of a process
// that attach with the same namespace, devices and options share one
// program, one set of maps and one TCX link per device (Attach); each
// adds and removes its own QPs. It implements Offload.
type RP struct {
	// Devs names the devices, in their namespace.
	Devs []string

	sh *shared
	// Guarded by sh.mu.
	held   map[uint32]struct{} // the QPNs this host added and did not remove
	closed bool
}

var _ Offload = (*RP)(nil)

// shared is one loaded and attached program and the hosts that hold it.
type shared struct {
	key   shareKey
	objs  *Objects
	links []link.Link
	refs  int // holders; guarded by shares' mutex

	mu sync.Mutex
	// owners says which host holds each QPN in rp_qps. Precondition: mu
	// is held.
	owners map[uint32]*RP
}

// shareKey names what hosts must have in common to share a program: the
// namespace (its cookie, never reused while the system runs, where an
// inode may be), the devices (ifindex:name, sorted: a device deleted and
// made again under its name is another one) and the load options.
type shareKey struct {
	netns uint64
	devs  string
	opts  LoadOptions
}

// shares are the process's attached programs by what they serve.
var shares struct {
	sync.Mutex
	m map[shareKey]*shared
}

// Attach attaches the program first in the TCX ingress chain of each of
// devs in namespace ns (netns.None() for the calling thread's), or takes
// a reference on the one an earlier Attach of this process attached there
// with the same devs and opts: every ingress packet then runs one copy of
// it, not one per host, and a lab's hosts load it once per node. Close
// drops the reference; the last one detaches and frees it. It passes
// every packet on. On error nothing stays attached.
//
// A shared program's slots serve all its hosts together: give them
// LoadOptions.QPs 0 (MaxQPs), since it cannot grow without a reload, and
// its mapped slots are resident only where QPs use them (windowPages).
// Its maps are keyed by QPN, which the namespace's QPN steering keeps
// unique among its open RoCEv2 ports (pktio.RoCEConn.QPNBlock).
func Attach(ns netns.NsHandle, devs []string, opts LoadOptions) (*RP, error) {
	if len(devs) == 0 {
		return nil, errors.New("rpbpf: attach: no device")
	}
	opts.QPs, opts.Pairs = slotsFor(opts.QPs, slotBytes, MaxQPs), slotsFor(opts.Pairs, ppfcSlotBytes, MaxPairs)
	var rp *RP
	err := nsexec.Do(ns, func() error {
		key, ifis, err := shareKeyOf(devs, opts)
		if err != nil {
			return err
		}
		shares.Lock()
		defer shares.Unlock()
		sh := shares.m[key]
		if sh == nil {
			// Loaded under the lock: a host that comes meanwhile waits
			// for this one's program rather than load its own.
			if sh, err = attachShared(key, ifis); err != nil {
				return err
			}
			if shares.m == nil {
				shares.m = make(map[shareKey]*shared)
			}
			shares.m[key] = sh
		}
		sh.refs++
		rp = &RP{Devs: devs, sh: sh, held: make(map[uint32]struct{})}
		return nil
	})
	if err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			err = fmt.Errorf("%w (the RP needs TCX, kernel >= %s)", err, tcxKernel)
		}
		return nil, fmt.Errorf("rpbpf: %w", err)
	}
	return rp, nil
}

// shareKeyOf is the share key of devs with opts in the calling thread's
// namespace, and the devices in devs' order.
func shareKeyOf(devs []string, opts LoadOptions) (shareKey, []*net.Interface, error) {
	cookie, err := netnsCookie()
	if err != nil {
		return shareKey{}, nil, err
	}
	ifis := make([]*net.Interface, len(devs))
	names := make([]string, len(devs))
	for i, dev := range devs {
		if ifis[i], err = net.InterfaceByName(dev); err != nil {
			return shareKey{}, nil, err
		}
		names[i] = strconv.Itoa(ifis[i].Index) + ":" + dev
	}
	slices.Sort(names)
	return shareKey{netns: cookie, devs: strings.Join(slices.Compact(names), ","), opts: opts}, ifis, nil
}

// netnsCookie is the calling thread's network namespace's cookie.
func netnsCookie() (uint64, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("netns cookie: %w", err)
	}
	defer unix.Close(fd)
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("netns cookie (SO_NETNS_COOKIE, Linux 5.14 or later): %w", err)
	}
	return c, nil
}

// attachShared loads the program and attaches it to ifis, in the calling
// thread's namespace.
func attachShared(key shareKey, ifis []*net.Interface) (_ *shared, err error) {
	objs, err := Load(key.opts)
	if err != nil {
		return nil, err
	}
	sh := &shared{key: key, objs: objs, owners: make(map[uint32]*RP)}
	defer func() {
		if err != nil {
			if cerr := sh.close(); cerr != nil {
				err = fmt.Errorf("%w (cleanup: %v)", err, cerr)
			}
		}
	}()
	for _, ifi := range ifis {
		l, err := link.AttachTCX(link.TCXOptions{
			Interface: ifi.Index, Program: objs.program(), Attach: ebpf.AttachTCXIngress, Anchor: link.Head(),
		})
		if err != nil {
			return nil, fmt.Errorf("attach rp_ingress to %s: %w", ifi.Name, err)
		}
		sh.links = append(sh.links, l)
	}
	return sh, nil
}

// close detaches the program and frees it.
func (sh *shared) close() error {
	var errs []error
	for _, l := range sh.links {
		errs = append(errs, l.Close())
	}
	sh.links = nil
	return errors.Join(append(errs, sh.objs.Close())...)
}

// AddQP implements Offload. A QPN another host of the shared program holds
// passes to this one: the namespace's steering gives a QPN to one open
// port at a time, so the other host's port has closed, and its Close must
// not remove this host's QP.
func (rp *RP) AddQP(c QPContext) (CNPCounter, error) {
	sh := rp.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if rp.closed {
		return nil, errors.New("rpbpf: closed")
	}
	ctr, err := sh.objs.AddQP(c)
	if err != nil {
		return nil, err
	}
	sh.owners[c.QPN] = rp
	rp.held[c.QPN] = struct{}{}
	return ctr, nil
}

// RemoveQP implements Offload. A QP the host added goes from the program
// unless another host took its QPN since; after Close, which removed them
// all, it only forgets the QPN.
func (rp *RP) RemoveQP(qpn uint32) error {
	sh := rp.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := rp.held[qpn]; !ok {
		return fmt.Errorf("rpbpf: remove qp %#x: %w", qpn, ErrUnknownQP)
	}
	delete(rp.held, qpn)
	if rp.closed || sh.owners[qpn] != rp {
		return nil
	}
	delete(sh.owners, qpn)
	return sh.objs.RemoveQP(qpn)
}

// Stats reads the program's counters: with a shared program they are
// every host's together, as a device's are. A QP's own CNPs are its
// CNPCounter's.
func (rp *RP) Stats() (Stats, error) { return rp.sh.objs.Stats() }

// Close removes the host's QPs, and detaches and frees the program if no
// other host holds it. It is idempotent.
func (rp *RP) Close() error {
	sh := rp.sh
	sh.mu.Lock()
	if rp.closed {
		sh.mu.Unlock()
		return nil
	}
	rp.closed = true
	var errs []error
	for qpn := range rp.held {
		if sh.owners[qpn] == rp {
			delete(sh.owners, qpn)
			errs = append(errs, sh.objs.RemoveQP(qpn))
		}
	}
	sh.mu.Unlock()
	shares.Lock()
	defer shares.Unlock()
	if sh.refs--; sh.refs > 0 {
		return errors.Join(errs...)
	}
	if shares.m[sh.key] == sh {
		delete(shares.m, sh.key)
	}
	return errors.Join(append(errs, sh.close())...)
}
