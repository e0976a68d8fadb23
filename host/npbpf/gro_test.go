package npbpf

import (
	"encoding/binary"
	"reflect"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/roce"
)

// groRun builds what a device that coalesces (GRO) hands np_ingress for
// the datagrams of segs, one flow: the first packet's headers, then every
// datagram's UDP payload, the IP and UDP lengths the run's, as
// udp_gro_complete leaves them. It returns the frame and gso_size.
func groRun(tb testing.TB, segs []dataPkt) ([]byte, uint32) {
	tb.Helper()
	const l3 = 14 // Ethernet, no tags; IPv4 without options
	const udpOff = l3 + 20
	first := segs[0].frame(tb)
	size := uint32(len(first) - udpOff - 8)
	run := append([]byte(nil), first...)
	for _, p := range segs[1:] {
		f := p.frame(tb)
		run = append(run, f[udpOff+8:]...)
	}
	binary.BigEndian.PutUint16(run[l3+2:], uint16(len(run)-l3))
	binary.BigEndian.PutUint16(run[udpOff+4:], uint16(len(run)-udpOff))
	return run, size
}

// TestIngressGRORun: a CE run a device coalesced is that many CE packets
// of its QP at once (one CNP, the rest coalesced and the CNP pending), its
// datagrams to another QP are counted and not answered, and a run without
// CE sends the pending CNP once N has passed, like any packet.
func TestIngressGRORun(t *testing.T) {
	o := loadTest(t)
	c := testQP(false, uint64(4*time.Microsecond))
	other := testQP(false, 0)
	other.QPN = 0x321
	addQP(t, o, c)
	addQP(t, o, other)
	setClock(t, o, 1e9)
	seg := func(qpn uint32, ecn uint8, psn uint32) dataPkt {
		return dataPkt{ecn: ecn, op: roce.OpRCWriteMiddle, payload: 1024, destQP: qpn, psn: psn}
	}
	run := func(segs ...dataPkt) {
		t.Helper()
		data, size := groRun(t, segs)
		out := make([]byte, len(data)+256)
		ret, err := o.objs.Ingress.Run(&ebpf.RunOptions{Data: data, DataOut: out,
			Context: bpf.SkBuff{GSOSegs: uint32(len(segs)), GSOSize: size}})
		if err != nil {
			t.Fatal(err)
		}
		if ret != tcxNext {
			t.Fatalf("verdict %d, want TC_ACT_UNSPEC", int32(ret))
		}
	}

	r0, s0 := redirects(t, o), stats(t, o)
	run(seg(c.QPN, ecnCE, 1), seg(c.QPN, ecnCE, 2), seg(c.QPN, ecnCE, 3))
	if n := redirects(t, o) - r0; n != 1 {
		t.Errorf("a CE run of 3: %d CNPs, want 1", n)
	}
	if d, want := statsDelta(s0, stats(t, o)), map[string]uint64{"packets": 1, "ce": 1, "cnp_sent": 1, "coalesced": 2,
		"gro_runs": 1, "gro_segments": 3}; !reflect.DeepEqual(d, want) {
		t.Errorf("a CE run of 3: stats changed by %v, want %v", d, want)
	}
	if got, want := counters(t, o, c.QPN), (NPCounters{NPECNMarkedRoCEPackets: 3, NPCNPSent: 1, NPCNPCoalesced: 2}); got != want {
		t.Errorf("a CE run of 3: counters %+v, want %+v", got, want)
	}

	// Two of c's, then one of another QP that shares the flow: within N
	// of the last CNP, c's two are coalesced; the other's is not answered.
	r0, s0 = redirects(t, o), stats(t, o)
	run(seg(c.QPN, ecnCE, 4), seg(c.QPN, ecnCE, 5), seg(other.QPN, ecnCE, 9))
	if n := redirects(t, o) - r0; n != 0 {
		t.Errorf("a CE run within N: %d CNPs, want 0", n)
	}
	if d, want := statsDelta(s0, stats(t, o)), map[string]uint64{"packets": 1, "ce": 1, "coalesced": 2,
		"gro_runs": 1, "gro_segments": 3, "gro_other_qp": 1}; !reflect.DeepEqual(d, want) {
		t.Errorf("a mixed CE run: stats changed by %v, want %v", d, want)
	}
	if got := counters(t, o, other.QPN); got != (NPCounters{}) {
		t.Errorf("the other QP's counters %+v, want none", got)
	}

	// N later a run without CE carries the pending CNP.
	setClock(t, o, 1e9+uint64(5*time.Microsecond))
	r0 = redirects(t, o)
	run(seg(c.QPN, ecnECT0, 6), seg(c.QPN, ecnECT0, 7))
	if n := redirects(t, o) - r0; n != 1 {
		t.Errorf("a run N after: %d CNPs, want the held one", n)
	}
	if got, want := counters(t, o, c.QPN), (NPCounters{NPECNMarkedRoCEPackets: 5, NPCNPSent: 2, NPCNPCoalesced: 4, NPCNPHeldSent: 1}); got != want {
		t.Errorf("counters %+v, want %+v", got, want)
	}
}

// FuzzIngressRun: np_ingress on any frame, as a run of any shape the
// device might claim (gso_segs, gso_size): it passes the packet, counts it
// once in exactly one cause, and never counts more datagrams of a run to
// another QP than the run held.
func FuzzIngressRun(f *testing.F) {
	o := loadTest(f)
	c := testQP(false, uint64(4*time.Microsecond))
	addQP(f, o, c)
	seg := dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 64, destQP: c.QPN}
	run, size := groRun(f, []dataPkt{seg, seg, seg})
	f.Add(run, uint16(3), uint16(size))
	f.Add(run, uint16(64), uint16(1))
	f.Add(run[:60], uint16(2), uint16(size))
	f.Add(seg.frame(f), uint16(0), uint16(0))
	f.Fuzz(func(t *testing.T, b []byte, segs, size uint16) {
		if len(b) < 14 || len(b) > 9000 {
			return // BPF_PROG_RUN wants an Ethernet header
		}
		before := stats(t, o)
		out := make([]byte, len(b)+256)
		ret, err := o.objs.Ingress.Run(&ebpf.RunOptions{Data: b, DataOut: out,
			Context: bpf.SkBuff{GSOSegs: uint32(segs), GSOSize: uint32(size)}})
		if err != nil {
			return // BPF_PROG_RUN refuses an IP ethertype without the IP header
		}
		after := stats(t, o)
		d := statsDelta(before, after)
		causes := d["not_roce"] + d["truncated"] + d["vlan"] + d["ip_options"] + d["fragment"] + d["not_request"] +
			d["malformed"] + d["unknown_qp"] + d["pkey_violations"] + d["not_ce"] + d["ce"]
		if ret != tcxNext || d["packets"] != 1 || causes != 1 {
			t.Fatalf("verdict %d, stats changed by %v: want TC_ACT_UNSPEC, one packet in one cause", int32(ret), d)
		}
		if d["gro_other_qp"] > d["gro_segments"] || d["gro_runs"] > 1 {
			t.Fatalf("stats changed by %v: a run's other-QP datagrams above its datagrams", d)
		}
	})
}
