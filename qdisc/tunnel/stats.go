package tunnel

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/fabriclab/fabriclab/bpf"
)

// Stats are a PE's counters, summed over CPUs.
type Stats struct {
	Encap EncapStats `json:"encap"`
	Decap DecapStats `json:"decap"`
}

// EncapStats count tunnel_encap's packets.
type EncapStats struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"` // inner IP bytes
	// Passed: not for a tunnel (no route, not IPv4, VLAN-tagged).
	Passed uint64 `json:"passed"`
	// TooBig did not fit the MTU once encapsulated; with DF they were
	// answered with ICMP Fragmentation Needed (ICMPSent), otherwise
	// dropped.
	TooBig     uint64 `json:"too_big"`
	ICMPSent   uint64 `json:"icmp_sent"`
	ICMPFailed uint64 `json:"icmp_failed"`
	Malformed  uint64 `json:"malformed"`
	Errors     uint64 `json:"errors"`
	// GSOFixed: GSO packets whose segments did not fit with the outer
	// header but whose gso_size the kernel keeps (not TCP): their
	// segments grew by 20 bytes.
	GSOFixed uint64 `json:"gso_fixed"`
	// InnerCE: ECN-capable packets marked CE inside while the tunnel was
	// heavily congested (Config.HeavyHold).
	InnerCE uint64 `json:"inner_ce"`
	// OuterECN counts encapsulated packets by the outer codepoint written,
	// indexed by ECN value.
	OuterECN [4]uint64 `json:"outer_ecn"`
}

// DecapStats count tunnel_decap's packets.
type DecapStats struct {
	Packets   uint64 `json:"packets"`
	Bytes     uint64 `json:"bytes"` // inner IP bytes
	Passed    uint64 `json:"passed"`
	Malformed uint64 `json:"malformed"`
	Spoofed   uint64 `json:"spoofed"`
	GSO       uint64 `json:"gso"`
	Errors    uint64 `json:"errors"`
	// Dropped by the table: inner Not-ECT under outer CE.
	Dropped uint64 `json:"dropped"`
	Warn    uint64 `json:"warn"`  // (!) cells
	Alarm   uint64 `json:"alarm"` // (!!!) cells
	// Light: outer ECT(1) over an ECN-capable inner header in
	// two-threshold mode, kept from the inner header.
	Light      uint64 `json:"light"`
	EventsLost uint64 `json:"events_lost"`
	// BadChecksum: the outer IPv4 header's checksum was wrong: dropped
	// (the PE runs before the kernel's IP receive path).
	BadChecksum uint64 `json:"bad_checksum"`
	// CNPLight and CNPHeavy count the WAN ports' notifications from peer
	// PEs; CNPUnknown the CNPs to this PE from others (passed on).
	CNPLight      uint64 `json:"cnp_light"`
	CNPHeavy      uint64 `json:"cnp_heavy"`
	CNPUnknown    uint64 `json:"cnp_unknown"`
	CNPEventsLost uint64 `json:"cnp_events_lost"`
	// Cells counts arrivals by [inner][outer] codepoint value.
	Cells [4][4]uint64 `json:"cells"`
}

// Stats reads the counters.
func (p *PE) Stats() (Stats, error) {
	var per []bpf.TunnelPeStats
	if err := p.maps.TunnelCounters.Lookup(uint32(0), &per); err != nil {
		return Stats{}, fmt.Errorf("read tunnel counters: %w", err)
	}
	var s Stats
	for _, c := range per {
		e, d := &s.Encap, &s.Decap
		e.Packets += c.EncapPackets
		e.Bytes += c.EncapBytes
		e.Passed += c.EncapPassed
		e.TooBig += c.EncapTooBig
		e.ICMPSent += c.EncapIcmpSent
		e.ICMPFailed += c.EncapIcmpFailed
		e.Malformed += c.EncapMalformed
		e.Errors += c.EncapErrors
		e.GSOFixed += c.EncapGsoFixed
		e.InnerCE += c.EncapInnerCe
		for i := range e.OuterECN {
			e.OuterECN[i] += c.EncapOuterEcn[i]
		}
		d.Packets += c.DecapPackets
		d.Bytes += c.DecapBytes
		d.Passed += c.DecapPassed
		d.Malformed += c.DecapMalformed
		d.Spoofed += c.DecapSpoofed
		d.GSO += c.DecapGso
		d.Errors += c.DecapErrors
		d.Dropped += c.DecapDropped
		d.Warn += c.DecapWarn
		d.Alarm += c.DecapAlarm
		d.Light += c.DecapLight
		d.EventsLost += c.DecapEventsLost
		d.BadChecksum += c.DecapBadChecksum
		d.CNPLight += c.CnpLight
		d.CNPHeavy += c.CnpHeavy
		d.CNPUnknown += c.CnpUnknown
		d.CNPEventsLost += c.CnpEventsLost
		for i, n := range c.DecapCells {
			d.Cells[i>>2][i&3] += n
		}
	}
	return s, nil
}

// Event is a decapsulated packet in a currently-unused cell of RFC 6040's
// table, reported at most once per cell per LogInterval.
type Event struct {
	Time                 time.Duration // CLOCK_MONOTONIC
	OuterSrc, OuterDst   netip.Addr
	InnerSrc, InnerDst   netip.Addr
	Inner, Outer, Result ECN
	Cell                 Cell
	Dropped              bool
}

// Events reads the unused-cell reports until ctx ends, calling fn for each.
func (p *PE) Events(ctx context.Context, fn func(Event)) error {
	return readRing(ctx, p.maps.TunnelEvents, func(raw []byte) error {
		var ev bpf.TunnelDecapEvent
		if err := binary.Read(bytes.NewReader(raw), binary.NativeEndian, &ev); err != nil {
			return fmt.Errorf("tunnel event: %w", err)
		}
		fn(Event{
			Time:     time.Duration(ev.TimeNs),
			OuterSrc: addrFromBE(ev.OuterSrc), OuterDst: addrFromBE(ev.OuterDst),
			InnerSrc: addrFromBE(ev.InnerSrc), InnerDst: addrFromBE(ev.InnerDst),
			Inner: ECN(ev.InnerEcn), Outer: ECN(ev.OuterEcn), Result: ECN(ev.ResultEcn),
			Cell: Cell(ev.Cell), Dropped: ev.Dropped != 0,
		})
		return nil
	})
}

// readRing reads a ring buffer until ctx ends.
func readRing(ctx context.Context, m *ebpf.Map, fn func([]byte) error) error {
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		return fmt.Errorf("ring buffer %v: %w", m, err)
	}
	stop := context.AfterFunc(ctx, func() { rd.Close() })
	defer stop()
	defer rd.Close()
	for {
		rec, err := rd.Read()
		if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, os.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ring buffer %v: %w", m, err)
		}
		if err := fn(rec.RawSample); err != nil {
			return err
		}
	}
}

// LogEvent writes an event as the RFC asks of unused cells: logged, at
// warning level for (!!!).
func LogEvent(log *slog.Logger, ev Event) {
	level := slog.LevelInfo
	if ev.Cell == CellAlarm {
		level = slog.LevelWarn
	}
	result := ev.Result.String()
	if ev.Dropped {
		result = "drop"
	}
	log.Log(context.Background(), level, "RFC 6040 unused ECN combination at decapsulation",
		"cell", ev.Cell.String(), "inner", ev.Inner.String(), "outer", ev.Outer.String(), "result", result,
		"outer_src", ev.OuterSrc, "outer_dst", ev.OuterDst, "inner_src", ev.InnerSrc, "inner_dst", ev.InnerDst)
}

// Notification is a WAN port's CNP as the PE received it.
type Notification struct {
	Time   time.Duration // CLOCK_MONOTONIC, at the PE's ingress
	Remote netip.Addr    // the egress PE: the tunnel
	Light  bool          // light congestion (ECT(1) past T1); else heavy (CE past T2)
	// DestQP and SourcePort name the marked flow: its BTH destination QP
	// and UDP source port.
	DestQP     uint32
	SourcePort uint16
}

// Notifications reads the WAN CNPs until ctx ends, calling fn for each.
func (p *PE) Notifications(ctx context.Context, fn func(Notification)) error {
	return readRing(ctx, p.maps.TunnelCnps, func(raw []byte) error {
		n, err := parseNotification(raw)
		if err == nil {
			fn(n)
		}
		return err
	})
}

func parseNotification(raw []byte) (Notification, error) {
	var ev bpf.TunnelCnpEvent
	if err := binary.Read(bytes.NewReader(raw), binary.NativeEndian, &ev); err != nil {
		return Notification{}, fmt.Errorf("tunnel CNP: %w", err)
	}
	return Notification{Time: time.Duration(ev.TimeNs), Remote: addrFromBE(ev.Remote), Light: ev.Light != 0,
		DestQP: ev.DestQp, SourcePort: ev.Sport}, nil
}

// NotificationReader reads the WAN CNPs one at a time on the caller's
// goroutine, for a loop that also keeps timers (the PE agent).
type NotificationReader struct{ rd *ringbuf.Reader }

// NotificationReader opens the CNP ring buffer; Close it when done.
func (p *PE) NotificationReader() (*NotificationReader, error) {
	rd, err := ringbuf.NewReader(p.maps.TunnelCnps)
	if err != nil {
		return nil, fmt.Errorf("tunnel CNPs: %w", err)
	}
	return &NotificationReader{rd: rd}, nil
}

// Next waits until deadline (zero: forever) for the next CNP; ok is false
// when the deadline passed first. After Close it returns os.ErrClosed.
func (r *NotificationReader) Next(deadline time.Time) (n Notification, ok bool, err error) {
	r.rd.SetDeadline(deadline)
	rec, err := r.rd.Read()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return Notification{}, false, nil
	}
	if errors.Is(err, ringbuf.ErrClosed) {
		return Notification{}, false, os.ErrClosed
	}
	if err != nil {
		return Notification{}, false, fmt.Errorf("tunnel CNPs: %w", err)
	}
	n, err = parseNotification(rec.RawSample)
	return n, err == nil, err
}

// Close ends a Next in progress and every later one.
func (r *NotificationReader) Close() error { return r.rd.Close() }

// Congestion is what a PE knows of congestion in one tunnel.
type Congestion struct {
	LightCNPs, HeavyCNPs uint64
	// LastLight and LastHeavy are when the last CNPs came
	// (CLOCK_MONOTONIC), 0 if none.
	LastLight, LastHeavy time.Duration
	// HeavyUntil is when inner CE marking stops.
	HeavyUntil    time.Duration
	InnerCEMarked uint64
}

// Congestion reads the per-tunnel congestion state, by remote PE.
func (p *PE) Congestion() (map[netip.Addr]Congestion, error) {
	out := map[netip.Addr]Congestion{}
	var k uint32
	var v bpf.TunnelPeCongestion
	it := p.maps.TunnelCongestion.Iterate()
	for it.Next(&k, &v) {
		out[addrFromBE(k)] = Congestion{LightCNPs: v.LightCnps, HeavyCNPs: v.HeavyCnps,
			LastLight: time.Duration(v.LastLightNs), LastHeavy: time.Duration(v.LastHeavyNs),
			HeavyUntil: time.Duration(v.HeavyUntilNs), InnerCEMarked: v.InnerCeMarked}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read tunnel congestion: %w", err)
	}
	return out, nil
}
