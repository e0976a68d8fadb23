// Package rpbpf is the DCQCN reaction point's CNP intake in the kernel: an
// eBPF program at TCX ingress of the sender's devices counts each CNP of a
// known QP with its arrival time, in a memory-mapped array the agent reads
// without a system call. The QP runs its host/dcqcn RP on every CNP counted
// since it last looked, at the CNP's arrival time, before each decision
// that uses Rc; so Rc is cut from the moment the CNP reached the device,
// however late the agent's receive loop wakes up (issue 9 §2: that wait
// was p50 270 µs, p99 16 ms on the 2-core lab VM). The program is
// bpf/rp.c; its header comment has the details.
//
// PPFC notifications (seed 003) toward a QP's peer are taken the same way:
// recorded with their arrival time, source, action and Pause Duration in
// the slot of the QP's (local, peer) pair, which every QP of the pair reads
// before each transmit decision (CNPCounter.PPFCCounted, PPFCEvent).
//
// The agent tells the RP about a QP when the QP connects (AddQP, which
// returns the QP's CNPCounter) and when it goes away (RemoveQP). RP
// (attached to devices) and Objects (loaded only, for BPF_PROG_RUN tests)
// both implement Offload, the interface the agent depends on.
package rpbpf

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/roce"
)

const (
	// Ring is how many arrival times a QP's slot keeps (RP_RING): a QP
	// that reads its counter less often than every Ring CNPs gets the
	// older ones' times as unknown.
	Ring = 14
	// MaxQPs is how many QPs one Objects serves (RP_SLOTS).
	MaxQPs = 16384
	// PPFCRing is how many PPFC notifications a pair's slot keeps
	// (RP_PPFC_RING).
	PPFCRing = 7
	// MaxPairs is how many (local, peer) pairs one Objects takes PPFC
	// notifications for (RP_PPFC_SLOTS).
	MaxPairs = 4096

	slotBytes     = 128
	ppfcSlotBytes = 256
	ppfcEventSize = 32
)

// ErrUnknownQP is wrapped by RemoveQP for a QPN that was not added (or was
// removed).
var ErrUnknownQP = errors.New("unknown qp")

// QPContext is what the RP needs about one connected QP to take its CNPs.
type QPContext struct {
	// QPN is the local (sender) QPN: the BTH DestQP of the CNPs the QP
	// receives. 1..0xffffff.
	QPN uint32
	// Local is the sender's address (the CNP's destination) and Peer the
	// receiver's (the NP, the CNP's source); both IPv4 or both IPv6. A
	// CNP to QPN from another address pair is not counted
	// (Stats.UnknownQP).
	Local, Peer netip.Addr
	// PKey is the QP's P_Key: a CNP whose P_Key does not match it
	// (roce.PKeyMatch) is not counted (Stats.PKeyViolations). Optional:
	// 0 means roce.DefaultPKey.
	PKey uint16
}

// Validate reports what is wrong with c, naming the field, its value and
// the allowed range.
func (c QPContext) Validate() error {
	var errs []error
	if c.QPN == 0 || c.QPN > 0xffffff {
		errs = append(errs, fmt.Errorf("rpbpf: QPN %#x: must be 0x1..0xffffff", c.QPN))
	}
	if c.PKey != 0 && !roce.ValidPKey(c.PKey) {
		errs = append(errs, fmt.Errorf("rpbpf: PKey %#04x: must have a base (low 15 bits) of 1..0x7fff", c.PKey))
	}
	l, p := c.Local.Unmap(), c.Peer.Unmap()
	switch {
	case !l.IsValid() || l.IsUnspecified():
		errs = append(errs, fmt.Errorf("rpbpf: Local %v: must be a unicast address", c.Local))
	case !p.IsValid() || p.IsUnspecified():
		errs = append(errs, fmt.Errorf("rpbpf: Peer %v: must be a unicast address", c.Peer))
	case l.Is4() != p.Is4():
		errs = append(errs, fmt.Errorf("rpbpf: Local %v and Peer %v: must be of one family", c.Local, c.Peer))
	}
	return errors.Join(errs...)
}

func (c QPContext) value(slot uint32) bpf.RpRpQp {
	v := bpf.RpRpQp{Slot: slot, Pkey: c.PKey}
	if v.Pkey == 0 {
		v.Pkey = roce.DefaultPKey
	}
	v.Family, v.LocalIp, v.PeerIp = bpf.QPAddrs(c.Local, c.Peer)
	return v
}

// pairKey is the QP's (local, peer) pair as rp_ppfc_peers keys it: both
// IPv4-mapped, as a PPFC notification names its destination.
func (c QPContext) pairKey() bpf.RpRpPpfcKey {
	return bpf.RpRpPpfcKey{LocalIp: c.Local.Unmap().As16(), PeerIp: c.Peer.Unmap().As16()}
}

// CNPCounter is one QP's CNPs as the kernel took them.
type CNPCounter interface {
	// Counted is how many CNPs arrived since the QP was added.
	Counted() uint64
	// Arrival is when CNP i (from 0, i < Counted()) reached the device, in
	// ns of CLOCK_MONOTONIC; ok is false once Ring later CNPs took its
	// place.
	Arrival(i uint64) (ns uint64, ok bool)
	// PPFCCounted is how many PPFC notifications toward the QP's peer
	// arrived since the QP was added.
	PPFCCounted() uint64
	// PPFCEvent is notification i (from 0, i < PPFCCounted()); ok is false
	// once PPFCRing later ones took its place.
	PPFCEvent(i uint64) (e PPFCEvent, ok bool)
}

// PPFCEvent is one PPFC notification as the kernel took it: from a port
// (Source) to this host, naming the QP's peer as congested.
type PPFCEvent struct {
	// AtNs is its arrival on the device, ns of CLOCK_MONOTONIC.
	AtNs   uint64
	Source netip.Addr
	Action roce.PPFCAction
	// Pause is its Pause Duration (0 in a resume).
	Pause time.Duration
	// PSN is the BTH PSN: the port's sequence per source.
	PSN uint32
}

// Offload is the RP's CNP intake in the kernel, as the agent uses it.
type Offload interface {
	// AddQP starts counting the CNPs of c.QPN (replacing an earlier QP of
	// that number).
	AddQP(c QPContext) (CNPCounter, error)
	// RemoveQP stops counting them; the counter then stays where it is.
	RemoveQP(qpn uint32) error
}

// Stats are the program's per-cause packet counters, summed over CPUs.
// Packets = NotRoCE + Truncated + GRORuns + IPOptions + NotCNP + PPFC +
// Malformed + UnknownQP + PKeyViolations + ICRCErrors + Counted +
// PPFCCounted.
type Stats struct {
	Packets   uint64 `json:"packets"`
	NotRoCE   uint64 `json:"not_roce"`
	Truncated uint64 `json:"truncated"`
	IPOptions uint64 `json:"ip_options"`
	NotCNP    uint64 `json:"not_cnp"`
	// PPFC: notifications toward no QP's (local, peer) pair here, left to
	// the agent.
	PPFC      uint64 `json:"ppfc"`
	Malformed uint64 `json:"malformed"`
	UnknownQP uint64 `json:"unknown_qp"`
	// PKeyViolations: CNPs of a known QP with a P_Key that does not match
	// the QP's.
	PKeyViolations uint64 `json:"pkey_violations"`
	ICRCErrors     uint64 `json:"icrc_errors"`
	Counted        uint64 `json:"rp_cnp_counted"`
	// GRORuns are runs of RoCEv2 datagrams a device coalesced (GRO): the
	// program leaves them to the agent, which gets their datagrams marked
	// pktio.Message.Coalesced and takes their CNPs itself.
	GRORuns uint64 `json:"gro_runs"`
	// PPFCCounted are PPFC notifications recorded for their pair.
	PPFCCounted uint64 `json:"rp_ppfc_counted"`
}
