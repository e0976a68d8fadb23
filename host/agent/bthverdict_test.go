package agent

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/npbpf"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/host/rpbpf"
)

// verdict is what a receiver did with a packet, in terms every receiver
// has: the agent, the kernel RP (rp_ingress) and the kernel NP
// (np_ingress).
type verdict string

const (
	vMalformed verdict = "malformed" // a BTH rule (roce.Parse, bpf/roce_check.h) or the length
	vUnknown   verdict = "unknown"   // not a QP's, or not from its peer
	vPKey      verdict = "pkey"      // P_Key violation
	vICRC      verdict = "icrc"      // bad ICRC (the NP does not check it)
	vTaken     verdict = "taken"     // the QP's
)

// bthLab is one agent QP and the kernel RP and NP loaded for
// BPF_PROG_RUN, all three given the same QP: its QPN, addresses and
// P_Key.
type bthLab struct {
	l    *ppfcLab
	qp   *QP
	rp   *rpbpf.Objects
	np   *npbpf.Objects
	pkey uint16
}

func newBTHLab(t *testing.T, pkey uint16) *bthLab {
	t.Helper()
	labtest.RequireRoot(t)
	l, qp := newSoloLab(t, pkey)
	rp, err := rpbpf.Load(rpbpf.LoadOptions{TestHooks: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rp.Close() })
	if _, err := rp.AddQP(rpbpf.QPContext{QPN: qp.QPN(), Local: l.local.Addr(), Peer: peerX.Addr(), PKey: pkey}); err != nil {
		t.Fatal(err)
	}
	np, err := npbpf.Load(npbpf.LoadOptions{TestHooks: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { np.Close() })
	err = np.AddQP(npbpf.QPContext{QPN: qp.QPN(), PeerQPN: 0x100, Local: l.local.Addr(), Peer: peerX.Addr(),
		SrcPort: 0xc001, PKey: pkey})
	if err != nil {
		t.Fatal(err)
	}
	return &bthLab{l: l, qp: qp, rp: rp, np: np, pkey: pkey}
}

// agent hands the UDP payload to the agent's receive path and reads which
// counter moved.
func (b *bthLab) agent(t *testing.T, from netip.AddrPort, tos uint8, payload []byte) verdict {
	t.Helper()
	before := b.l.a.Counters()
	b.l.deliver(from, tos, append([]byte(nil), payload...))
	after := b.l.a.Counters()
	switch {
	case after.Malformed > before.Malformed:
		return vMalformed
	case after.UnknownQP > before.UnknownQP, after.WrongPeer > before.WrongPeer:
		return vUnknown
	case after.PKeyViolations > before.PKeyViolations:
		return vPKey
	case after.ICRCErrors > before.ICRCErrors:
		return vICRC
	case after.RxPackets > before.RxPackets:
		return vTaken
	}
	t.Fatalf("agent: no counter moved: %+v", after)
	return ""
}

func (b *bthLab) rpVerdict(t *testing.T, frame []byte) verdict {
	t.Helper()
	return kernelVerdict(t, "rp", frame, b.rp.RunIngress, b.rp.Stats, func(s rpbpf.Stats) []uint64 {
		return []uint64{s.Malformed + s.Truncated, s.UnknownQP, s.PKeyViolations, s.ICRCErrors, s.Counted}
	})
}

func (b *bthLab) npVerdict(t *testing.T, frame []byte) verdict {
	t.Helper()
	return kernelVerdict(t, "np", frame, b.np.RunIngress, b.np.Stats, func(s npbpf.Stats) []uint64 {
		return []uint64{s.Malformed + s.Truncated, s.UnknownQP, s.PKeyViolations, 0, s.CE + s.NotCE} // no ICRC check
	})
}

// kernelVerdicts are the verdicts in the order a kernel role's counts
// lists its counters.
var kernelVerdicts = [...]verdict{vMalformed, vUnknown, vPKey, vICRC, vTaken}

// kernelVerdict hands frame to a kernel role's program and reads which of
// its counters moved.
func kernelVerdict[S any](t *testing.T, role string, frame []byte, run func([]byte) (uint32, error),
	stats func() (S, error), counts func(S) []uint64) verdict {
	t.Helper()
	s0, err := stats()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(frame); err != nil {
		t.Fatal(err)
	}
	s, err := stats()
	if err != nil {
		t.Fatal(err)
	}
	before, after := counts(s0), counts(s)
	for i, v := range kernelVerdicts {
		if after[i] > before[i] {
			return v
		}
	}
	t.Fatalf("%s: no verdict counter moved: %+v", role, s)
	return ""
}

// frameOf wraps a UDP payload from src to dst (port 4791) in Ethernet,
// IPv4 (checksummed) and UDP headers, with tos.
func frameOf(src, dst netip.AddrPort, tos uint8, payload []byte) []byte {
	f := make([]byte, 14+20+8+len(payload))
	f[12], f[13] = 0x08, 0x00
	ip := f[14:34]
	ip[0], ip[1] = 0x45, tos
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	ip[6], ip[8], ip[9] = 0x40, 64, 17
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:], s4[:])
	copy(ip[16:], d4[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := f[34:42]
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], roce.UDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	copy(f[42:], payload)
	return f
}

// bthCase is one packet: a well-formed one of op with plen payload bytes,
// then its BTH byte 1 (SE, M, PadCnt, TVer) and P_Key overwritten, its
// length changed by trim bytes (negative: cut), from a source, sealed
// with a good ICRC unless badICRC.
type bthCase struct {
	op      roce.Opcode
	plen    int
	flags   uint8
	pkey    uint16
	trim    int
	from    netip.AddrPort
	destQP  uint32
	badICRC bool
	ce      bool
}

func (c bthCase) String() string {
	return fmt.Sprintf("%s plen %d flags %#02x pkey %#04x trim %+d from %v qp %#x badICRC %v ce %v",
		c.op, c.plen, c.flags, c.pkey, c.trim, c.from, c.destQP, c.badICRC, c.ce)
}

func (c bthCase) payload(to netip.AddrPort) []byte {
	h := roce.Header{BTH: roce.BTH{Opcode: c.op, DestQP: c.destQP, PSN: 1, BECN: c.op == roce.OpCNP}}
	h.RETH.DMALen = uint32(c.plen)
	b := make([]byte, roce.PacketLen(c.op, c.plen)+8)
	n := roce.Build(b, &h, make([]byte, c.plen))
	b = b[:n]
	b[1] = c.flags
	binary.BigEndian.PutUint16(b[2:], c.pkey)
	switch {
	case c.trim > 0:
		b = append(b[:n-roce.ICRCLen], make([]byte, c.trim+roce.ICRCLen)...)
	case c.trim < 0:
		b = b[:max(roce.BTHLen, n+c.trim)]
	}
	if len(b) >= roce.BTHLen+roce.ICRCLen {
		roce.SealICRC(c.from, to, b)
		if c.badICRC {
			b[len(b)-1] ^= 0x5A
		}
	}
	return b
}

// TestBTHVerdictsAgree feeds the same packets to the agent, the kernel RP
// and the kernel NP, each holding the same QP, and requires the same
// verdict from each: one rule set for TVer, PadCnt, lengths and the P_Key
// (issue 28). CNPs go to the agent and the RP, RC requests to the agent
// and the NP (which answers CE and checks no ICRC: its cases all have a
// good one).
func TestBTHVerdictsAgree(t *testing.T) {
	const qpPKey = 0x8123 // a full member of partition 0x123
	b := newBTHLab(t, qpPKey)
	stranger := netip.MustParseAddrPort("198.18.7.7:4791")
	pkeys := []uint16{qpPKey, 0x0123, 0xFFFF, 0x7FFF, 0x8124, 0x0000, 0x8000}
	flags := []uint8{0x00, 0x01, 0x08, 0x0F, 0x10, 0x20, 0x30, 0x31, 0xC0, 0xF0}
	n := 0
	seen := map[string]int{}
	check := func(c bthCase, kernel string, got, want verdict) {
		t.Helper()
		n++
		seen[kernel+" "+string(want)]++
		if got != want {
			t.Errorf("%v: %s %s, agent %s", c, kernel, got, want)
		}
	}
	// CNPs: the agent and the RP.
	for _, fl := range flags {
		for _, pk := range pkeys {
			for _, trim := range []int{0, 4, -4, -20} {
				for _, src := range []netip.AddrPort{peerX, stranger} {
					for _, bad := range []bool{false, true} {
						c := bthCase{op: roce.OpCNP, flags: fl, pkey: pk, trim: trim, from: src, destQP: b.qp.QPN(), badICRC: bad}
						p := c.payload(b.l.local)
						want := b.agent(t, c.from, 0, p)
						check(c, "rp", b.rpVerdict(t, frameOf(c.from, b.l.local, 0, p)), want)
					}
				}
			}
		}
	}
	// The vectors: TVer 1 and PadCnt 3 with a correct ICRC are
	// malformed; the valid CNP is the QP's.
	for _, v := range []struct {
		flags uint8
		want  verdict
	}{{0x00, vTaken}, {0x01, vMalformed}, {0x30, vMalformed}} {
		c := bthCase{op: roce.OpCNP, flags: v.flags, pkey: qpPKey, from: peerX, destQP: b.qp.QPN()}
		if got := b.rpVerdict(t, frameOf(c.from, b.l.local, 0, c.payload(b.l.local))); got != v.want {
			t.Errorf("%v: rp %s, want %s", c, got, v.want)
		}
	}
	// RC requests: the agent and the NP.
	ops := []roce.Opcode{roce.OpRCSendOnly, roce.OpRCSendLastImm, roce.OpRCWriteFirst, roce.OpRCWriteOnly, roce.OpRCWriteOnlyImm, roce.OpRCWriteMiddle}
	for _, op := range ops {
		for _, plen := range []int{0, 1, 3, 8} {
			for _, fl := range flags {
				for _, pk := range []uint16{qpPKey, 0x0123, 0xFFFF, 0x8124, 0x8000} {
					for _, trim := range []int{0, -4, -9, -17} {
						for _, src := range []netip.AddrPort{peerX, stranger} {
							c := bthCase{op: op, plen: plen, flags: fl, pkey: pk, trim: trim, from: src, destQP: b.qp.QPN(), ce: plen%2 == 1}
							tos := uint8(0x02)
							if c.ce {
								tos = 0x03
							}
							p := c.payload(b.l.local)
							want := b.agent(t, c.from, tos, p)
							check(c, "np", b.npVerdict(t, frameOf(c.from, b.l.local, tos, p)), want)
							b.l.clock.Advance(time.Microsecond)
						}
					}
				}
			}
		}
	}
	t.Logf("%d packets, the same verdict from the agent and the kernel: %v", n, seen)
	// Every verdict was reached, or the cases test less than they seem.
	for _, k := range []string{"rp malformed", "rp unknown", "rp pkey", "rp icrc", "rp taken",
		"np malformed", "np unknown", "np pkey", "np taken"} {
		if seen[k] == 0 {
			t.Errorf("no case where the %s", k)
		}
	}
}
