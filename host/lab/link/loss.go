//go:build linux

package link

import (
	"errors"
	"fmt"
	"math"
	"net"

	"github.com/cilium/ebpf"
	ebpflink "github.com/cilium/ebpf/link"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/roce"
)

// LossSpec describes random loss on one device (the kernel here has no
// netem): each UDP datagram to UDPPort is dropped with probability
// Fraction, independently (bpf/drop.c).
type LossSpec struct {
	// Fraction is the drop probability, 0..1, applied in parts per million.
	Fraction float64
	// UDPPort is the destination port whose datagrams may be dropped.
	// Optional: 0 means 4791 (RoCEv2).
	UDPPort uint16
	// Ingress drops at the device's TCX ingress instead of its egress.
	// Optional.
	Ingress bool
}

// LossStats are the loss link's counters, summed over CPUs.
type LossStats struct {
	Packets      uint64 // every frame the program saw
	Candidates   uint64 // UDP datagrams to the port
	Dropped      uint64
	DroppedBytes uint64
	Other        uint64 // not candidates
	Malformed    uint64 // headers cut short, passed
}

// Fraction is the measured share of candidates dropped.
func (s LossStats) Fraction() float64 {
	if s.Candidates == 0 {
		return 0
	}
	return float64(s.Dropped) / float64(s.Candidates)
}

// Loss is a drop program attached to one device of a namespace.
type Loss struct {
	dev    string
	objs   bpf.DropObjects
	lnk    ebpflink.Link
	closed bool
}

// FractionPPM converts a drop probability to the program's parts per
// million.
func FractionPPM(f float64) (uint32, error) {
	if math.IsNaN(f) || f < 0 || f > 1 {
		return 0, specErr("LossSpec.Fraction", "%v outside 0..1", f)
	}
	return uint32(math.Round(f * 1e6)), nil
}

// NewLoss attaches a loss link to dev in ns, first in its TCX chain, so a
// port program behind it never sees the dropped packets. It needs TCX
// (kernel >= 6.6). Close detaches it.
func NewLoss(ns Netns, dev string, spec LossSpec) (*Loss, error) {
	ppm, err := FractionPPM(spec.Fraction)
	if err != nil {
		return nil, err
	}
	if spec.UDPPort == 0 {
		spec.UDPPort = roce.UDPPort // the default target of a loss link
	}
	cs, err := bpf.LoadDrop()
	if err != nil {
		return nil, fmt.Errorf("link: load drop spec: %w", err)
	}
	if err := cs.Variables[bpf.DropVarUdpDport].Set(spec.UDPPort); err != nil {
		return nil, fmt.Errorf("link: set udp_dport: %w", err)
	}
	l := &Loss{dev: dev}
	if err := cs.LoadAndAssign(&l.objs, bpf.LoadOptions()); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("link: load drop program: %+v", ve)
		}
		return nil, fmt.Errorf("link: load drop program: %w", err)
	}
	if err := l.objs.DropCfg.Put(uint32(0), ppm); err != nil {
		l.objs.Close()
		return nil, fmt.Errorf("link: set drop probability: %w", err)
	}
	where := ebpf.AttachTCXEgress
	if spec.Ingress {
		where = ebpf.AttachTCXIngress
	}
	err = ns.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		l.lnk, err = ebpflink.AttachTCX(ebpflink.TCXOptions{Interface: ifi.Index, Program: l.objs.DropUdp, Attach: where, Anchor: ebpflink.Head()})
		return err
	})
	if err != nil {
		l.objs.Close()
		if errors.Is(err, ebpf.ErrNotSupported) {
			err = fmt.Errorf("%w (loss links need TCX, kernel >= %s)", err, tcxKernel)
		}
		return nil, fmt.Errorf("link: attach drop program to %s: %w", dev, err)
	}
	return l, nil
}

// SetFraction changes the drop probability of the live link.
func (l *Loss) SetFraction(f float64) error {
	ppm, err := FractionPPM(f)
	if err != nil {
		return err
	}
	return l.objs.DropCfg.Put(uint32(0), ppm)
}

// Stats reads the counters.
func (l *Loss) Stats() (LossStats, error) {
	var s LossStats
	if err := bpf.SumPerCPU[bpf.DropDropStats](l.objs.DropCounters, 0, &s); err != nil {
		return LossStats{}, fmt.Errorf("link: %w", err)
	}
	return s, nil
}

// Close detaches the program and frees it. It is idempotent; not safe
// for concurrent use with the other methods.
func (l *Loss) Close() error {
	if l.closed {
		return nil
	}
	l.closed = true
	return errors.Join(l.lnk.Close(), l.objs.Close())
}
