package npbpf

import (
	"syscall"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/roce"
)

// The transmit hook through BPF_PROG_RUN, which cannot run a tracing
// program: np_xmit_test runs np_xmit's logic for test_skb on test_dev
// (netns-tests TestNPBPF and TestNPBPFQdisc run the real one).

const (
	skbA, skbB = 0xffff_8880_0000_1000, 0xffff_8880_0000_2000
	devA, devB = 0xffff_8880_0001_0000, 0xffff_8880_0002_0000
)

// ingressAt runs np_ingress on data at the clock at and reports whether it
// decided a CNP.
func ingressAt(tb testing.TB, o *Objects, at uint64, data []byte) bool {
	tb.Helper()
	setClock(tb, o, at)
	r0 := redirects(tb, o)
	runProg(tb, o.objs.Ingress, data, 0)
	return redirects(tb, o) != r0
}

func egressAt(tb testing.TB, o *Objects, at uint64, data []byte) {
	tb.Helper()
	setClock(tb, o, at)
	if ret, _ := runProg(tb, o.objs.Egress, data, o.Mark()); ret != tcActRedirect {
		tb.Fatalf("np_egress returned %d", int32(ret))
	}
}

func transmitAt(tb testing.TB, o *Objects, at uint64) {
	tb.Helper()
	setClock(tb, o, at)
	transmit(tb, o, o.Mark())
}

// TestXmitStampsTransmit: with the hook, a built CNP holds the QP's next
// decision until it is transmitted, and N counts from the transmit; the
// least spacing is between transmits.
func TestXmitStampsTransmit(t *testing.T) {
	o := loadTest(t)
	const n = 10_000
	c := testQP(false, n)
	addQP(t, o, c)
	setXmitHook(t, o, true)
	setTestSkb(t, o, skbA, devA)
	ce := dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 64, destQP: c.QPN}.frame(t)
	ect := dataPkt{ecn: ecnECT0, op: roce.OpRCWriteMiddle, payload: 64, destQP: c.QPN}.frame(t)
	t0 := uint64(5e9)
	if !ingressAt(t, o, t0, ce) {
		t.Fatal("no CNP for the first CE")
	}
	egressAt(t, o, t0+1000, ce)
	if q := qpState(t, o, c.QPN); q.Inflight != 2 || q.OutSkb != skbA || q.BuiltNs != t0+1000 {
		t.Fatalf("after np_egress: inflight %d out_skb %#x built %d; want built, %#x, t0+1000", q.Inflight, q.OutSkb, q.BuiltNs-t0, uint64(skbA))
	}
	if ingressAt(t, o, t0+1000+n+1000, ce) {
		t.Fatal("a CNP decided while the last one was not transmitted")
	}
	transmitAt(t, o, t0+15_000)
	if q := qpState(t, o, c.QPN); q.Inflight != 0 || q.OutSkb != 0 || q.LastCnpNs != t0+15_000 {
		t.Fatalf("after the transmit: inflight %d out_skb %#x last_cnp t0+%d", q.Inflight, q.OutSkb, q.LastCnpNs-t0)
	}
	if ingressAt(t, o, t0+15_000+n-1, ect) {
		t.Fatal("the held CNP left less than N after the transmit")
	}
	if !ingressAt(t, o, t0+15_000+n, ect) {
		t.Fatal("the held CNP did not leave N after the transmit")
	}
	setTestSkb(t, o, skbB, devA)
	egressAt(t, o, t0+15_000+n+500, ce)
	transmitAt(t, o, t0+15_000+n+3000)
	got := counters(t, o, c.QPN)
	if want := (NPCounters{NPECNMarkedRoCEPackets: 2, NPCNPSent: 2, NPCNPCoalesced: 1, NPCNPHeldSent: 1, MinCNPSpacing: timeNs(n + 3000)}); got != want {
		t.Errorf("counters %+v, want %+v", got, want)
	}
	if s := stats(t, o); s.EgressBuilt != 2 || s.XmitStamped != 2 || s.EgressStamped != 0 || s.XmitLate != 0 || s.XmitTimeouts != 0 || s.XmitQueued != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestXmitQueued: a CNP a qdisc holds after the clone returned keeps the
// QP waiting until it is transmitted, and is counted as queued.
func TestXmitQueued(t *testing.T) {
	o := loadTest(t)
	const n = 10_000
	c := testQP(false, n)
	addQP(t, o, c)
	setXmitHook(t, o, true)
	setQdiscHolds(t, o, true)
	setTestSkb(t, o, skbA, devA)
	ce := dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 64, destQP: c.QPN}.frame(t)
	ect := dataPkt{ecn: ecnECT0, op: roce.OpRCWriteMiddle, payload: 64, destQP: c.QPN}.frame(t)
	t0 := uint64(6e9)
	if !ingressAt(t, o, t0, ce) {
		t.Fatal("no CNP for the first CE")
	}
	if s := stats(t, o); s.XmitQueued != 1 || s.CNPSent != 1 {
		t.Fatalf("stats %+v: want one CNP, queued", s)
	}
	if ingressAt(t, o, t0+5*n, ce) {
		t.Fatal("a CNP decided while the last one waits in the qdisc")
	}
	transmitAt(t, o, t0+6*n)
	if ingressAt(t, o, t0+7*n-1, ect) {
		t.Fatal("the held CNP left less than N after the transmit")
	}
	if !ingressAt(t, o, t0+7*n, ect) {
		t.Fatal("the held CNP did not leave N after the transmit")
	}
	if got := counters(t, o, c.QPN); got.NPCNPSent != 2 || got.NPCNPHeldSent != 1 || got.NPCNPXmitTimeouts != 0 {
		t.Errorf("counters %+v", got)
	}
}

// TestXmitTimeout: a CNP the hook never sees stops holding the QP
// DefaultXmitTimeout after np_egress built it; if it is transmitted after
// all, it is late, still moves N, and shows in the least spacing.
func TestXmitTimeout(t *testing.T) {
	o := loadTest(t)
	const n = 10_000
	timeout := uint64(DefaultXmitTimeout)
	c := testQP(false, n)
	addQP(t, o, c)
	setXmitHook(t, o, true)
	setQdiscHolds(t, o, true)
	setTestSkb(t, o, skbA, devA)
	ce := dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 64, destQP: c.QPN}.frame(t)
	t0 := uint64(7e9)
	if !ingressAt(t, o, t0, ce) {
		t.Fatal("no CNP for the first CE")
	}
	if ingressAt(t, o, t0+timeout-1, ce) {
		t.Fatal("a CNP before the timeout")
	}
	setTestSkb(t, o, skbB, devA)
	if !ingressAt(t, o, t0+timeout, ce) {
		t.Fatal("no CNP at the timeout")
	}
	if got, s := counters(t, o, c.QPN), stats(t, o); got.NPCNPXmitTimeouts != 1 || s.XmitTimeouts != 1 {
		t.Fatalf("timeouts: qp %d, device %d; want 1", got.NPCNPXmitTimeouts, s.XmitTimeouts)
	}
	// The first CNP goes out after all: late. The QP still waits for
	// the second.
	setTestSkb(t, o, skbA, devA)
	transmitAt(t, o, t0+timeout+100)
	if q := qpState(t, o, c.QPN); q.Inflight != 2 || q.OutSkb != skbB || q.LastCnpNs != t0+timeout+100 {
		t.Fatalf("after the late transmit: inflight %d out_skb %#x last_cnp t0+%d; want waiting for %#x", q.Inflight, q.OutSkb, q.LastCnpNs-t0, uint64(skbB))
	}
	if ingressAt(t, o, t0+timeout+100+n, ce) {
		t.Fatal("a CNP while the second waits")
	}
	setTestSkb(t, o, skbB, devA)
	transmitAt(t, o, t0+timeout+200)
	if s := stats(t, o); s.XmitStamped != 2 || s.XmitLate != 1 {
		t.Errorf("stats %+v: want 2 stamped at the hook, 1 late", s)
	}
	if got := counters(t, o, c.QPN); got.MinCNPSpacing != 100 {
		t.Errorf("min spacing %v: want the 100 ns between the late CNP and the next", got.MinCNPSpacing)
	}
}

// TestXmitRedirectError: a CNP the qdisc refused (an error back from the
// clone) ends the wait at once: the next packet N later sends it.
func TestXmitRedirectError(t *testing.T) {
	o := loadTest(t)
	const n = 10_000
	c := testQP(false, n)
	addQP(t, o, c)
	setXmitHook(t, o, true)
	setQdiscHolds(t, o, true)
	setTestSkb(t, o, skbA, devA)
	if err := o.SetRedirectError(int32(syscall.ENOBUFS)); err != nil {
		t.Fatal(err)
	}
	ce := dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 64, destQP: c.QPN}.frame(t)
	ect := dataPkt{ecn: ecnECT0, op: roce.OpRCWriteMiddle, payload: 64, destQP: c.QPN}.frame(t)
	t0 := uint64(8e9)
	ingressAt(t, o, t0, ce)
	if q := qpState(t, o, c.QPN); q.Inflight != 0 || q.Pending != 1 {
		t.Fatalf("after a refused CNP: inflight %d pending %d; want 0, 1", q.Inflight, q.Pending)
	}
	if err := o.SetRedirectError(0); err != nil {
		t.Fatal(err)
	}
	if !ingressAt(t, o, t0+n, ect) {
		t.Fatal("the refused CNP was not sent again N later")
	}
	if got := counters(t, o, c.QPN); got.NPCNPErrors != 1 || got.NPCNPSent != 1 || got.NPCNPXmitTimeouts != 0 {
		t.Errorf("counters %+v", got)
	}
}

// TestXmitOnlyOwnCNPs: the hook takes only a packet with the object's
// mark, at an sk_buff address np_egress recorded, on the same device, once;
// another NP object with the same mark takes none of it.
func TestXmitOnlyOwnCNPs(t *testing.T) {
	o := loadTest(t)
	other := loadTest(t)
	const n = 10_000
	c := testQP(false, n)
	addQP(t, o, c)
	addQP(t, other, c)
	setXmitHook(t, o, true)
	setXmitHook(t, other, true)
	ce := dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 64, destQP: c.QPN}.frame(t)
	setTestSkb(t, o, skbA, devA)
	egressAt(t, o, 1e9, ce)
	waiting := func() bool { return qpState(t, o, c.QPN).Inflight == 2 }

	setClock(t, o, 1e9+100)
	transmit(t, o, o.Mark()+1) // another mark
	setTestSkb(t, o, skbB, devA)
	transmit(t, o, o.Mark()) // another sk_buff
	setTestSkb(t, o, skbA, devB)
	transmit(t, o, o.Mark()) // another device
	setTestSkb(t, other, skbA, devA)
	transmit(t, other, other.Mark()) // the same packet, seen by another object
	if !waiting() {
		t.Fatal("the QP stopped waiting for a packet that is not its CNP")
	}
	if s, so := stats(t, o), stats(t, other); s.XmitStamped != 0 || so.XmitStamped != 0 {
		t.Fatalf("stamped: %d here, %d in the other object; want 0", s.XmitStamped, so.XmitStamped)
	}
	setTestSkb(t, o, skbA, devA)
	transmit(t, o, o.Mark())
	transmit(t, o, o.Mark()) // a second time: forgotten after the first
	if waiting() {
		t.Fatal("the QP still waits after its CNP was transmitted")
	}
	if s := stats(t, o); s.XmitStamped != 1 {
		t.Errorf("stamped %d, want 1", s.XmitStamped)
	}

	// A CNP whose QP went away meanwhile is forgotten.
	egressAt(t, o, 2e9, ce)
	if err := o.RemoveQP(c.QPN); err != nil {
		t.Fatal(err)
	}
	transmit(t, o, o.Mark())
	if s := stats(t, o); s.XmitStamped != 1 {
		t.Errorf("stamped %d after the QP's removal, want 1", s.XmitStamped)
	}
}

// TestXmitNotAttached: without the hook (xmit_hook 0) N counts from
// np_egress, and the QP never waits for a transmit.
func TestXmitNotAttached(t *testing.T) {
	o := loadTest(t)
	c := testQP(false, 0)
	addQP(t, o, c)
	ce := dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 64, destQP: c.QPN}.frame(t)
	egressAt(t, o, 1e9, ce)
	egressAt(t, o, 1e9+4000, ce)
	if q := qpState(t, o, c.QPN); q.Inflight != 0 || q.LastCnpNs != 1e9+4000 {
		t.Errorf("inflight %d last_cnp %d", q.Inflight, q.LastCnpNs)
	}
	if s := stats(t, o); s.EgressStamped != 2 || s.XmitStamped != 0 {
		t.Errorf("stats %+v: want both stamped at np_egress", s)
	}
	if got := counters(t, o, c.QPN); got.MinCNPSpacing != 4*time.Microsecond {
		t.Errorf("min spacing %v, want 4µs", got.MinCNPSpacing)
	}
}

func TestXmitTimeoutRange(t *testing.T) {
	for _, d := range []time.Duration{-1, time.Microsecond - 1, time.Second + 1} {
		if _, err := Load(LoadOptions{XmitTimeout: d}); err == nil {
			t.Errorf("xmit timeout %v accepted", d)
		}
	}
}
