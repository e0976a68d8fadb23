package qdisc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The trimming tests' port: class 3 (DSCP 26) trims to DefaultTrimBytes
// with DefaultTrimDSCP into class 7; class 7 holds 64 KiB.
const (
	trimClass  = DefaultTrimClass
	trimDSCP   = DefaultTrimDSCP
	trimBytes  = int(DefaultTrimBytes)
	trimFrame  = 14 + trimBytes // the trimmed frame, untagged
	trimLimit7 = 64 * units.KiB
	// A trimmed packet goes through the device's egress once more.
	tcActRedirect = 7
)

func trimConfig() Config {
	cfg := DefaultConfig(units.Gbit)
	cfg.Classes[ClassRoCE].SetTrim()
	cfg.Classes[trimClass].LimitBytes = trimLimit7
	return cfg
}

// runTrim runs prog like run, but keeps the output at the length the
// program left (a trimmed packet is shorter than its input).
func runTrim(tb testing.TB, prog *ebpf.Program, data []byte, in skbCtx) runResult {
	tb.Helper()
	var r runResult
	opts := &ebpf.RunOptions{Data: data, DataOut: make([]byte, len(data)+256), Context: in, ContextOut: &r.ctx}
	ret, err := prog.Run(opts)
	if err != nil {
		tb.Fatalf("prog run: %v", err)
	}
	r.ret, r.out = ret, opts.DataOut
	r.pkt = gopacket.NewPacket(r.out, layers.LayerTypeEthernet, gopacket.Default)
	if ip, ok := r.pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		r.ecn, r.dscp = ip.TOS&3, ip.TOS>>2
	}
	return r
}

// fillClass sets a class's backlog so that a packet of n bytes no longer
// fits: the limit drops it, or trims it.
func fillClass(tb testing.TB, o *Objects, cfg Config, class ClassID, n int) {
	tb.Helper()
	setBacklog(tb, o, class, uint64(cfg.Classes[class].LimitBytes)-uint64(n)+1)
}

func fixIPv4Checksum(hdr []byte) {
	binary.BigEndian.PutUint16(hdr[10:], 0)
	var sum uint32
	for i := 0; i+1 < len(hdr); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(hdr[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(hdr[10:], ^uint16(sum))
}

// checkTrimmed checks that out is in cut to trimBytes of IP packet at l3
// with the trim DSCP and in's ECN: IPv4 length and checksum, UDP length,
// UDP checksum 0 (BPF_PROG_RUN's skbs are not CHECKSUM_PARTIAL), and every
// other byte as it was.
func checkTrimmed(t *testing.T, in, out []byte, l3 int) {
	t.Helper()
	if len(out) != l3+trimBytes {
		t.Fatalf("trimmed frame is %d bytes, want %d (%d of IP packet)", len(out), l3+trimBytes, trimBytes)
	}
	ip, udp := out[l3:], out[l3+20:]
	if tos := ip[1]; tos>>2 != uint8(trimDSCP) || tos&3 != in[l3+1]&3 {
		t.Errorf("tos %#x: want dscp %d and the ecn bits of %#x", tos, trimDSCP, in[l3+1])
	}
	if n := binary.BigEndian.Uint16(ip[2:]); n != uint16(trimBytes) {
		t.Errorf("IPv4 total length %d, want %d", n, trimBytes)
	}
	if !ipv4ChecksumOK(ip[:20]) {
		t.Errorf("IPv4 header checksum invalid: % x", ip[:20])
	}
	if n := binary.BigEndian.Uint16(udp[4:]); n != uint16(trimBytes-20) {
		t.Errorf("UDP length %d, want %d", n, trimBytes-20)
	}
	if c := binary.BigEndian.Uint16(udp[6:]); c != 0 {
		t.Errorf("UDP checksum %#04x, want 0 (none)", c)
	}
	changed := map[int]bool{l3 + 1: true, l3 + 2: true, l3 + 3: true, l3 + 10: true, l3 + 11: true,
		l3 + 24: true, l3 + 25: true, l3 + 26: true, l3 + 27: true}
	for i := range out {
		if !changed[i] && out[i] != in[i] {
			t.Errorf("byte %d changed: %#02x -> %#02x", i, in[i], out[i])
		}
	}
}

// TestTrimFullClass: a UDP packet the full class would drop leaves cut to
// trim_bytes, with the trim DSCP and its ECN, in the trim class, in both
// queue modes and behind a VLAN tag where the mode takes one.
func TestTrimFullClass(t *testing.T) {
	for _, mode := range []QueueMode{QueueVeth, QueueVirtual} {
		for _, ecn := range []uint8{notECT, ect1, ect0, ce} {
			for _, vlans := range []int{0, 1} {
				if vlans > 0 && mode == QueueVeth {
					continue // in-band tags cannot be stamped: unaccounted, tail-dropped
				}
				name := strings.Join([]string{mode.String(), []string{"not-ect", "ect1", "ect0", "ce"}[ecn], []string{"untagged", "vlan"}[vlans]}, " ")
				t.Run(name, func(t *testing.T) {
					cfg := trimConfig()
					o := loadTest(t, cfg, mode)
					in := craft(t, pktSpec{dscp: 26, ecn: ecn, payload: 1000, vlans: vlans})
					l3 := 14 + 4*vlans
					if mode == QueueVirtual {
						// The virtual queue drains with the clock: keep it still.
						if err := o.SetClock(1_000_000_000); err != nil {
							t.Fatal(err)
						}
						fillVirtual(t, o, cfg, len(in))
					} else {
						fillClass(t, o, cfg, ClassRoCE, len(in))
					}
					before := stats(t, o)
					r := runTrim(t, o.PortEnqueue, in, skbCtx{Mark: 0x1234})
					if r.ret != tcActRedirect {
						t.Fatalf("verdict %d, want redirect (trimmed, to this device's egress once more)", r.ret)
					}
					if r.ctx.Mark != trimMark(0) || r.ctx.CB[0] != 0x1234 {
						t.Errorf("mark %#x cb[0] %#x: want the trim mark %#x and the packet's own mark 0x1234 kept in cb[0]", r.ctx.Mark, r.ctx.CB[0], trimMark(0))
					}
					checkTrimmed(t, in, r.out, l3)
					if want := uint32(priorityBase) + uint32(trimClass); r.ctx.Priority != want {
						t.Errorf("skb->priority %#x, want %#x (the trim class)", r.ctx.Priority, want)
					}
					if mode == QueueVeth && r.ctx.Tstamp&0xff != 0xA8|uint64(trimClass) {
						t.Errorf("stamp %#x: want the magic and class %d in the low byte", r.ctx.Tstamp, trimClass)
					}
					after := stats(t, o)
					c, tc := after.Classes[ClassRoCE], after.Classes[trimClass]
					c0, tc0 := before.Classes[ClassRoCE], before.Classes[trimClass]
					kept := uint64(l3 + trimBytes)
					if c.TrimmedPackets != 1 || c.TrimmedBytes != uint64(len(in))-kept || c.TrimmedKeptBytes != kept ||
						c.DroppedPackets() != 0 || c.EnqueuedPackets-c0.EnqueuedPackets != 1 {
						t.Errorf("class 3: trimmed %d (cut %d B, kept %d B), dropped %d, enqueued %d; want 1 (%d, %d), 0, 1",
							c.TrimmedPackets, c.TrimmedBytes, c.TrimmedKeptBytes, c.DroppedPackets(), c.EnqueuedPackets-c0.EnqueuedPackets, uint64(len(in))-kept, kept)
					}
					if tc.TrimInPackets != 1 || tc.TrimInBytes != kept || tc.EnqueuedPackets != 1 || tc.EnqueuedBytes != kept ||
						tc.BacklogBytes-tc0.BacklogBytes != kept || tc.BacklogPackets-tc0.BacklogPackets != 1 {
						t.Errorf("class %d: trim in %d/%d B, enqueued %d/%d B, backlog +%d B +%d; want 1/%d B each, +%d B +1",
							trimClass, tc.TrimInPackets, tc.TrimInBytes, tc.EnqueuedPackets, tc.EnqueuedBytes,
							tc.BacklogBytes-tc0.BacklogBytes, tc.BacklogPackets-tc0.BacklogPackets, kept, kept)
					}
				})
			}
		}
	}
}

// TestTrimIPv6: an IPv6 UDP packet the full class would drop leaves cut
// to trim_bytes of IP packet, its traffic class the trim DSCP with its ECN
// bits, flow label kept, payload and UDP lengths the new ones, and a UDP
// checksum that verifies over what is kept (RFC 8200 §8.1: IPv6 requires
// one), an odd length padded; every other byte as it was.
func TestTrimIPv6(t *testing.T) {
	for _, keep := range []int{trimBytes, trimBytes + 1, 48, 1500} {
		cfg := trimConfig()
		cfg.Classes[ClassRoCE].TrimBytes = units.ByteSize(keep)
		o := loadTest(t, cfg, QueueVeth)
		for _, ecn := range []uint8{notECT, ect0, ce} {
			t.Run(fmt.Sprintf("trim=%d/ecn=%d", keep, ecn), func(t *testing.T) {
				in := craft(t, pktSpec{v6: true, dscp: 26, ecn: ecn, payload: 2000})
				fillClass(t, o, cfg, ClassRoCE, len(in))
				c0 := stats(t, o).Classes[ClassRoCE]
				r := runTrim(t, o.PortEnqueue, in, skbCtx{})
				if r.ret != tcActRedirect {
					t.Fatalf("verdict %d, want redirect (trimmed)", r.ret)
				}
				out := r.out
				if len(out) != 14+keep {
					t.Fatalf("trimmed frame is %d bytes, want %d", len(out), 14+keep)
				}
				ip6, ok := r.pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
				if !ok {
					t.Fatalf("no IPv6 header in % x", out[:54])
				}
				if ip6.TrafficClass>>2 != uint8(trimDSCP) || ip6.TrafficClass&3 != ecn || ip6.FlowLabel != 0xabcde {
					t.Errorf("traffic class %#x, flow label %#x: want dscp %d, ecn %d, flow label 0xabcde", ip6.TrafficClass, ip6.FlowLabel, trimDSCP, ecn)
				}
				udpLen := keep - 40
				if ip6.Length != uint16(udpLen) || binary.BigEndian.Uint16(out[14+40+4:]) != uint16(udpLen) {
					t.Errorf("payload length %d, UDP length %d: want %d", ip6.Length, binary.BigEndian.Uint16(out[14+40+4:]), udpLen)
				}
				src, _ := netip.AddrFromSlice(ip6.SrcIP)
				dst, _ := netip.AddrFromSlice(ip6.DstIP)
				udp := out[14+40:]
				if c := binary.BigEndian.Uint16(udp[6:]); c == 0 || udp6Sum(src, dst, udp, nil) != 0xFFFF {
					t.Errorf("UDP checksum %#04x does not verify over the %d bytes kept", c, udpLen)
				}
				changed := map[int]bool{14: true, 15: true, 14 + 4: true, 14 + 5: true, 14 + 40 + 4: true, 14 + 40 + 5: true,
					14 + 40 + 6: true, 14 + 40 + 7: true}
				for i := range out {
					if !changed[i] && out[i] != in[i] {
						t.Errorf("byte %d changed: %#02x -> %#02x", i, in[i], out[i])
					}
				}
				if c := stats(t, o).Classes[ClassRoCE]; c.TrimmedPackets-c0.TrimmedPackets != 1 || c.DroppedPackets() != c0.DroppedPackets() {
					t.Errorf("class 3: trimmed +%d, dropped +%d; want +1, +0", c.TrimmedPackets-c0.TrimmedPackets, c.DroppedPackets()-c0.DroppedPackets())
				}
			})
		}
	}
}

func readQueue(tb testing.TB, o *Objects, class ClassID) bpf.PortClassState {
	tb.Helper()
	var st bpf.PortClassState
	if err := o.ClassQueue.Lookup(uint32(class), &st); err != nil {
		tb.Fatal(err)
	}
	return st
}

// fillVirtual fills class 3's virtual queue at a still clock so that a
// packet of n bytes no longer fits.
func fillVirtual(tb testing.TB, o *Objects, cfg Config, n int) {
	tb.Helper()
	fillClass(tb, o, cfg, ClassRoCE, n)
	// vq_last_ns = now: nothing drains before the packet arrives.
	st := readQueue(tb, o, ClassRoCE)
	st.VqLastNs = 1_000_000_000
	if err := o.ClassQueue.Put(uint32(ClassRoCE), &st); err != nil {
		tb.Fatal(err)
	}
}

// TestTrimNotTrimmable: at a full class, what cannot be trimmed is
// tail-dropped as before, and cut headers are safe.
func TestTrimNotTrimmable(t *testing.T) {
	cfg := trimConfig()
	o := loadTest(t, cfg, QueueVeth)
	udp := craft(t, pktSpec{dscp: 26, ecn: ect0, payload: 1000})

	tcp := bytes.Clone(udp)
	tcp[14+9] = 6
	fixIPv4Checksum(tcp[14:34])
	frag := bytes.Clone(udp)
	frag[14+6] |= 0x20 // more fragments
	fixIPv4Checksum(frag[14:34])
	later := bytes.Clone(udp)
	binary.BigEndian.PutUint16(later[14+6:], 0x4000|185) // DF, offset 1480
	fixIPv4Checksum(later[14:34])
	// The IP header says 1028 bytes; the frame carries 100 of them.
	cut := bytes.Clone(udp[:14+100])
	// 128 bytes of IP packet: nothing to cut.
	exact := craft(t, pktSpec{dscp: 26, ecn: ect0, payload: trimBytes - 28})
	short := craft(t, pktSpec{dscp: 26, ecn: ect0, payload: 40})
	// IPv6 with a hop-by-hop options header before UDP: not walked.
	v6ext := craft(t, pktSpec{v6: true, dscp: 26, ecn: ect0, payload: 1000})
	v6ext[14+6] = 0
	// A UDP header cut short behind the IP header: too short to trim.
	stub := bytes.Clone(udp[:14+20+4])
	binary.BigEndian.PutUint16(stub[14+2:], 24)
	fixIPv4Checksum(stub[14:34])

	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"tcp", tcp},
		{"ipv4 first fragment", frag},
		{"ipv4 later fragment", later},
		{"ipv6 with an extension header", v6ext},
		{"udp cut short of its ip length", cut},
		{"udp of exactly trim_bytes", exact},
		{"udp shorter than trim_bytes", short},
		{"udp header cut short", stub},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fillClass(t, o, cfg, ClassRoCE, len(tc.data))
			before := stats(t, o)
			r := runTrim(t, o.PortEnqueue, tc.data, skbCtx{})
			if r.ret != tcActShot {
				t.Fatalf("verdict %d, want drop", r.ret)
			}
			after := stats(t, o)
			c, c0 := after.Classes[ClassRoCE], before.Classes[ClassRoCE]
			if c.DroppedLimitPackets-c0.DroppedLimitPackets != 1 || c.TrimmedPackets != c0.TrimmedPackets ||
				c.TrimDroppedPackets != c0.TrimDroppedPackets {
				t.Errorf("limit drops +%d, trimmed +%d, trim drops +%d; want +1, 0, 0",
					c.DroppedLimitPackets-c0.DroppedLimitPackets, c.TrimmedPackets-c0.TrimmedPackets, c.TrimDroppedPackets-c0.TrimDroppedPackets)
			}
			if tc, tc0 := after.Classes[trimClass], before.Classes[trimClass]; tc.EnqueuedPackets != tc0.EnqueuedPackets || tc.BacklogBytes != tc0.BacklogBytes {
				t.Errorf("the trim class took %d packets", tc.EnqueuedPackets-tc0.EnqueuedPackets)
			}
		})
	}

	// IP options: 24 bytes of IP header and 8 of UDP do not fit in 28.
	small := trimConfig()
	small.Classes[ClassRoCE].TrimBytes = MinTrimBytes
	o2 := loadTest(t, small, QueueVeth)
	opts := make([]byte, 0, len(udp)+4)
	opts = append(opts, udp[:34]...)
	opts = append(opts, 1, 1, 1, 0) // NOP, NOP, NOP, EOL
	opts = append(opts, udp[34:]...)
	opts[14] = 0x46
	binary.BigEndian.PutUint16(opts[14+2:], binary.BigEndian.Uint16(udp[14+2:])+4)
	fixIPv4Checksum(opts[14:38])
	fillClass(t, o2, small, ClassRoCE, len(opts))
	if r := runTrim(t, o2.PortEnqueue, opts, skbCtx{}); r.ret != tcActShot {
		t.Errorf("ip options beyond trim_bytes: verdict %d, want drop", r.ret)
	}
	// IPv6's headers alone are 48 bytes: not trimmable to 28.
	v6 := craft(t, pktSpec{v6: true, dscp: 26, ecn: ect0, payload: 1000})
	fillClass(t, o2, small, ClassRoCE, len(v6))
	if r := runTrim(t, o2.PortEnqueue, v6, skbCtx{}); r.ret != tcActShot {
		t.Errorf("ipv6 with trim_bytes 28: verdict %d, want drop", r.ret)
	}
	// Without options the same port trims to 28 bytes: the headers alone.
	fillClass(t, o2, small, ClassRoCE, len(udp))
	r := runTrim(t, o2.PortEnqueue, udp, skbCtx{})
	if r.ret != tcActRedirect || len(r.out) != 14+28 {
		t.Fatalf("trim to 28 bytes: verdict %d, %d bytes out", r.ret, len(r.out))
	}
	if u, ok := r.pkt.Layer(layers.LayerTypeUDP).(*layers.UDP); !ok || u.Length != 8 || len(u.Payload) != 0 {
		t.Errorf("trimmed to the headers: UDP %+v", r.pkt.Layer(layers.LayerTypeUDP))
	}
}

// TestTrimPassesWithRoom: with room in the class, trimming changes nothing,
// for packets longer or shorter than trim_bytes.
func TestTrimPassesWithRoom(t *testing.T) {
	o := loadTest(t, trimConfig(), QueueVeth)
	for _, payload := range []int{40, trimBytes - 28, 1000} {
		in := craft(t, pktSpec{dscp: 26, ecn: ect0, payload: payload})
		r := runTrim(t, o.PortEnqueue, in, skbCtx{})
		if r.ret != tcActOK || !bytes.Equal(r.out, in) {
			t.Errorf("payload %d with room: verdict %d, packet changed %v", payload, r.ret, !bytes.Equal(r.out, in))
		}
		if want := uint32(priorityBase) + uint32(ClassRoCE); r.ctx.Priority != want {
			t.Errorf("payload %d with room: priority %#x, want %#x", payload, r.ctx.Priority, want)
		}
	}
	if c := stats(t, o).Classes[ClassRoCE]; c.TrimmedPackets != 0 || c.EnqueuedPackets != 3 {
		t.Errorf("trimmed %d of %d packets with room", c.TrimmedPackets, c.EnqueuedPackets)
	}
}

// TestTrimClassFull: when the trim class has no room for the trimmed frame
// either, the packet is dropped and counted as a trim drop; one byte more
// room and it is trimmed.
func TestTrimClassFull(t *testing.T) {
	cfg := trimConfig()
	for _, mode := range []QueueMode{QueueVeth, QueueVirtual} {
		t.Run(mode.String(), func(t *testing.T) {
			o := loadTest(t, cfg, mode)
			if err := o.SetClock(1_000_000_000); err != nil {
				t.Fatal(err)
			}
			in := craft(t, pktSpec{dscp: 26, ecn: ect0, payload: 1000})
			for _, room := range []int{trimFrame - 1, trimFrame} {
				fillVirtual(t, o, cfg, len(in))
				st := readQueue(t, o, trimClass)
				st.BacklogBytes = uint64(trimLimit7) - uint64(room)
				st.VqLastNs = 1_000_000_000
				if err := o.ClassQueue.Put(uint32(trimClass), &st); err != nil {
					t.Fatal(err)
				}
				before := stats(t, o)
				r := runTrim(t, o.PortEnqueue, in, skbCtx{})
				after := stats(t, o)
				c, c0 := after.Classes[ClassRoCE], before.Classes[ClassRoCE]
				tc, tc0 := after.Classes[trimClass], before.Classes[trimClass]
				if room < trimFrame {
					if r.ret != tcActShot || c.TrimDroppedPackets-c0.TrimDroppedPackets != 1 ||
						c.TrimDroppedBytes-c0.TrimDroppedBytes != uint64(len(in)) || c.TrimmedPackets != c0.TrimmedPackets {
						t.Errorf("trim class full: verdict %d, trim drops +%d (+%d B), trimmed +%d; want drop, +1 (+%d B), 0",
							r.ret, c.TrimDroppedPackets-c0.TrimDroppedPackets, c.TrimDroppedBytes-c0.TrimDroppedBytes, c.TrimmedPackets-c0.TrimmedPackets, len(in))
					}
					if c.DroppedLimitPackets != c0.DroppedLimitPackets || c.DroppedPackets()-c0.DroppedPackets() != 1 {
						t.Errorf("trim drop counted as a limit drop too, or not as a drop")
					}
					if tc.EnqueuedPackets != tc0.EnqueuedPackets || tc.BacklogBytes != tc0.BacklogBytes || tc.BacklogPackets != tc0.BacklogPackets {
						t.Errorf("trim class: enqueued +%d, backlog %d -> %d B: the claim was not given back",
							tc.EnqueuedPackets-tc0.EnqueuedPackets, tc0.BacklogBytes, tc.BacklogBytes)
					}
				} else if r.ret != tcActRedirect || c.TrimmedPackets-c0.TrimmedPackets != 1 || tc.BacklogBytes != uint64(trimLimit7) {
					t.Errorf("exactly room for the trimmed frame: verdict %d, trimmed +%d, trim class backlog %d B of %d",
						r.ret, c.TrimmedPackets-c0.TrimmedPackets, tc.BacklogBytes, trimLimit7)
				}
			}
		})
	}
}

// TestTrimAccounting fills a small class with real packets, trims the next
// one, then takes every packet out through the dequeue program: each class
// leaves its queue empty with enqueued = dequeued + dropped + trimmed +
// backlog, in packets and bytes.
func TestTrimAccounting(t *testing.T) {
	cfg := trimConfig()
	cfg.Classes[ClassRoCE] = ClassConfig{Name: "roce", LimitBytes: 4000}
	cfg.Classes[ClassRoCE].SetTrim()
	o := loadTest(t, cfg, QueueVeth)
	const t0 = 1_000_000_000
	if err := o.SetClock(t0); err != nil {
		t.Fatal(err)
	}
	in := craft(t, pktSpec{dscp: 26, ecn: ect0, payload: 1000}) // 1042 bytes: 3 fit
	var queued []runResult
	for i := range 5 {
		r := runTrim(t, o.PortEnqueue, in, skbCtx{})
		if trimmed := len(r.out) < len(in); trimmed != (i >= 3) {
			t.Fatalf("packet %d: trimmed %v (%d bytes out)", i, trimmed, len(r.out))
		}
		if want := map[bool]uint32{false: tcActOK, true: tcActRedirect}[i >= 3]; r.ret != want {
			t.Fatalf("packet %d: verdict %d, want %d", i, r.ret, want)
		}
		if i >= 3 {
			// The second pass after the redirect: accounted already.
			before := stats(t, o)
			again := runTrim(t, o.PortEnqueue, r.out, skbCtx{Mark: r.ctx.Mark, CB: r.ctx.CB, Tstamp: r.ctx.Tstamp, Priority: r.ctx.Priority})
			if again.ret != tcActOK || again.ctx.Mark != 0 || !bytes.Equal(again.out, r.out) ||
				again.ctx.Tstamp != r.ctx.Tstamp || again.ctx.Priority != r.ctx.Priority {
				t.Fatalf("second pass: verdict %d, mark %#x, packet changed %v, stamp %#x -> %#x, priority %#x -> %#x; want pass, mark 0, all kept",
					again.ret, again.ctx.Mark, !bytes.Equal(again.out, r.out), r.ctx.Tstamp, again.ctx.Tstamp, r.ctx.Priority, again.ctx.Priority)
			}
			if after := stats(t, o); after.Total().EnqueuedPackets != before.Total().EnqueuedPackets || after.Port != before.Port {
				t.Fatalf("second pass counted: %+v -> %+v", before.Port, after.Port)
			}
		}
		queued = append(queued, r)
	}
	if err := o.SetClock(t0 + 50_000); err != nil {
		t.Fatal(err)
	}
	for i, r := range queued {
		if d := runTrim(t, o.PortDequeue, r.out, skbCtx{Tstamp: r.ctx.Tstamp}); d.ret != tcActNext {
			t.Fatalf("dequeue %d: verdict %d", i, d.ret)
		}
	}
	s := stats(t, o)
	c, tc := s.Classes[ClassRoCE], s.Classes[trimClass]
	if c.EnqueuedPackets != 5 || c.DequeuedPackets != 3 || c.TrimmedPackets != 2 || c.BacklogBytes != 0 {
		t.Errorf("class 3: enqueued %d, dequeued %d, trimmed %d, backlog %d B; want 5, 3, 2, 0",
			c.EnqueuedPackets, c.DequeuedPackets, c.TrimmedPackets, c.BacklogBytes)
	}
	if tc.EnqueuedPackets != 2 || tc.DequeuedPackets != 2 || tc.DequeuedBytes != 2*uint64(trimFrame) || tc.BacklogBytes != 0 {
		t.Errorf("class %d: enqueued %d, dequeued %d (%d B), backlog %d B; want 2, 2 (%d B), 0",
			trimClass, tc.EnqueuedPackets, tc.DequeuedPackets, tc.DequeuedBytes, tc.BacklogBytes, 2*trimFrame)
	}
	for _, cl := range s.Classes {
		if err := cl.CheckInvariant(); err != nil {
			t.Error(err)
		}
	}
	tot := s.Total()
	if err := tot.CheckInvariant(); err != nil {
		t.Errorf("port total: %v", err)
	}

	// Trimming off, live: the next packet is tail-dropped.
	cfg.Classes[ClassRoCE].TrimBytes, cfg.Classes[ClassRoCE].TrimDSCP, cfg.Classes[ClassRoCE].TrimClass = 0, 0, 0
	if err := o.writeConfig(cfg, QueueVeth, priorityBase); err != nil {
		t.Fatal(err)
	}
	fillClass(t, o, cfg, ClassRoCE, len(in))
	if r := runTrim(t, o.PortEnqueue, in, skbCtx{}); r.ret != tcActShot || len(r.out) != len(in) {
		t.Errorf("trimming off: verdict %d, %d bytes out; want drop", r.ret, len(r.out))
	}
}

// TestTrimMalformed: frames cut anywhere, with trimming on and the class
// full, never crash and are never passed as trimmed.
func TestTrimMalformed(t *testing.T) {
	cfg := trimConfig()
	for _, mode := range []QueueMode{QueueVeth, QueueVirtual} {
		o := loadTest(t, cfg, mode)
		for _, vlans := range []int{0, 1} {
			full := craft(t, pktSpec{dscp: 26, ecn: ect0, payload: 1000, vlans: vlans})
			// BPF_PROG_RUN refuses untagged IP frames shorter than an IP
			// header; behind a tag only the program's checks stand guard.
			for n := 14 + 20*(1-vlans); n <= 14+4*vlans+trimBytes+8; n++ {
				fillVirtual(t, o, cfg, 1) // full: every frame is over the limit
				r := runTrim(t, o.PortEnqueue, bytes.Clone(full[:n]), skbCtx{})
				if r.ret != tcActShot && len(r.out) < n {
					t.Errorf("%s, %d vlans, frame cut to %d bytes: passed as %d bytes", mode, vlans, n, len(r.out))
				}
			}
		}
		if s := stats(t, o); s.Classes[ClassRoCE].TrimmedPackets != 0 {
			t.Errorf("%s: trimmed %d cut frames", mode, s.Classes[ClassRoCE].TrimmedPackets)
		}
	}
}

func TestValidateTrim(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(*ClassConfig, *Config)
		want string
	}{
		{"trim_bytes below an IPv4 and a UDP header", func(cc *ClassConfig, _ *Config) { cc.TrimBytes = 20 },
			"class 3: trim: trim_bytes (20b) must be 28b to 1500b, or 0 (off)"},
		{"trim_bytes above an MTU", func(cc *ClassConfig, _ *Config) { cc.TrimBytes = 1501 },
			"class 3: trim: trim_bytes (1501b) must be 28b to 1500b, or 0 (off)"},
		{"trim_dscp 0", func(cc *ClassConfig, _ *Config) { cc.TrimDSCP = 0 },
			"class 3: trim: trim_dscp (0) must be 1 to 63 (0 is best effort"},
		{"trim_dscp 64", func(cc *ClassConfig, _ *Config) { cc.TrimDSCP = 64 }, "class 3: trim: trim_dscp (64) must be 1 to 63"},
		{"trim_class 8", func(cc *ClassConfig, _ *Config) { cc.TrimClass = 8 }, "class 3: trim: trim_class (8) must be 0 to 7"},
		{"trim_class itself", func(cc *ClassConfig, _ *Config) { cc.TrimClass = 3 },
			"class 3: trim: trim_class (3) must be another class (0 to 7, not 3)"},
		{"trim class trims", func(_ *ClassConfig, c *Config) { c.Classes[7].SetTrim(); c.Classes[7].TrimClass = 6 },
			"class 3: trim: trim_class (7) trims too: a trim class must not trim"},
		{"trim class too small", func(_ *ClassConfig, c *Config) { c.Classes[7].LimitBytes = 141 },
			"class 3: trim: trim_class 7's limit (141b) must hold one trimmed frame (trim_bytes 128b + 14b Ethernet header)"},
		{"trim_dscp of the class itself", func(cc *ClassConfig, _ *Config) { cc.TrimDSCP = 26 },
			"class 3: trim: trim_dscp (26) is a DSCP of class 3 itself: a receiver could not tell trimmed packets from whole ones (map it to the trim class: dscp 26 -> class 7)"},
		{"trim_dscp without trim_bytes", func(cc *ClassConfig, _ *Config) { cc.TrimBytes = 0 },
			"class 3: trim: trim_dscp (9) and trim_class (7) need trim_bytes (0: trimming off)"},
	} {
		c := DefaultConfig(units.Gbit)
		c.Classes[3].SetTrim()
		tc.mut(&c.Classes[3], &c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	c := DefaultConfig(units.Gbit)
	c.Classes[3].SetTrim()
	c.Classes[7].LimitBytes = 142
	if err := c.Validate(); err != nil {
		t.Errorf("trimming with defaults: %v", err)
	}
	for cl := range ClassID(NumClasses) {
		if want := cl == ClassCNP || cl == 7; c.StrictPriority(cl) != want {
			t.Errorf("class %d: strict priority %v, want %v", cl, c.StrictPriority(cl), want)
		}
	}
	r := leafRates(&c)
	if r[7] != r[ClassCNP] || r[7] != r[ClassRoCE] {
		t.Errorf("leaf rates %v: every class should have the same token guarantee (strict ones borrow first)", r)
	}
}
