package netnstests

import (
	"net/netip"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lab/link"
	"github.com/fabriclab/fabriclab/host/npbpf"
	"github.com/fabriclab/fabriclab/host/npbpf/npprobe"
	"github.com/fabriclab/fabriclab/host/roce"
)

// TestNPBehindDelayLink (issue 28, fault 6): the kernel NP on a device that
// also has a delay link on its egress. The NP's CNP is a clone of the CE
// packet that np_egress recognises by its mark and rewrites from its
// Ethernet header; the delay link, first at that egress, sends the clone
// through its TUN, whose write path builds a new sk_buff with neither.
// Before the delay link kept them (bpf/delay.c, "Marks"), every clone left
// as a copy of the data packet, addressed to the NP's own host, and the
// sender got no CNP (100 CE, 100 clones, 0 CNPs). Now every CE of either
// family gets its CNP, well formed, after the link's delay.
func TestNPBehindDelayLink(t *testing.T) {
	const (
		delay = time.Millisecond
		n     = 100
		gap   = 2 * delay // a CNP of the QP is out before the next CE
	)
	l := newNPLab(t, npbpf.Options{})
	d, err := l.np.AddDelay(npDev, link.DelaySpec{Delay: delay})
	if err != nil {
		t.Fatal(err)
	}
	for i, v6 := range []bool{false, true} {
		name := map[bool]string{false: "ipv4", true: "ipv6"}[v6]
		t.Run(name, func(t *testing.T) {
			s := l.sender(t, v6)
			a := npLabNP.Addr()
			if v6 {
				a = npLabNP6.Addr()
			}
			dst := netip.AddrPortFrom(a, roce.UDPPort)
			// Neighbours resolved before anything is measured.
			if err := s.Send(dst, []npprobe.Data{npData(0x999, 0, false)}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			c := l.qp(t, uint32(0x111+i), uint32(0x211+i), v6, 0)
			tp := l.tap(t)
			st0, ds0 := npStats(t, l.nph), d.Stats()
			for k := range n {
				if err := s.Send(dst, []npprobe.Data{npData(c.QPN, uint32(k), true)}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(gap)
			}
			got, err := s.Receive(100*time.Millisecond, time.Now().Add(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			cnt := npCounters(t, l.nph, c.QPN)
			st, ds := npStats(t, l.nph), d.Stats()
			built, kept, restored := st.EgressBuilt-st0.EgressBuilt, ds.MarksKept-ds0.MarksKept, ds.MarksRestored-ds0.MarksRestored
			pkts := tapPackets(tp, cnt.NPCNPSent)
			r := npprobe.Analyze(pkts, map[uint32]uint32{c.QPN: c.PeerQPN})
			p50 := npprobe.Percentile(r.Latency, 0.5)
			t.Logf("%d CE: %d CNPs sent, %d built at egress, %d received; delay link: %d marks kept, %d restored, lateness max %v; CE in -> CNP out p50 %v, max %v",
				n, cnt.NPCNPSent, built, len(got), kept, restored, ds.LatenessMax, p50, npprobe.Percentile(r.Latency, 1))
			checkReceivedCNPs(t, got, c, int(cnt.NPCNPSent))
			if cnt.NPECNMarkedRoCEPackets != n || cnt.NPCNPSent < n/2 || built != cnt.NPCNPSent || kept != cnt.NPCNPSent || restored != kept {
				t.Errorf("%d CE counted, %d CNPs sent, %d built, %d marks kept, %d restored: want %d CE, at least %d CNPs, every one kept, restored and built",
					cnt.NPECNMarkedRoCEPackets, cnt.NPCNPSent, built, kept, restored, n, n/2)
			}
			// The CNP crossed the link: it left the device a delay after its CE came in.
			if len(r.Latency) == 0 || p50 < delay {
				t.Errorf("CE in -> CNP out p50 %v over %d CNPs: want at least the link's %v", p50, len(r.Latency), delay)
			}
		})
	}
	if ds := d.Stats(); ds.Dropped != 0 || ds.KernelDropped != 0 || ds.TunDropped != 0 {
		t.Errorf("the delay link dropped: %+v", ds)
	}
}

func npStats(t *testing.T, np *npbpf.NP) npbpf.Stats {
	t.Helper()
	st, err := np.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}
