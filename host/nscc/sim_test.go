package nscc_test

import (
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/nscc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// bottleneck is a fake switch port for closed-loop tests: one FIFO served
// at rate, ECN-marking a packet that finds more than markBytes queued ahead
// of it, no drops. A packet's ACK comes back baseRTT after it starts
// service plus its queueing: RTT = base + queue/rate.
type bottleneck struct {
	rate       units.Rate
	baseRTT    time.Duration
	markBytes  float64
	lastDepart time.Duration // when the last packet queued leaves
	acks       []simPacket   // in departure order, which is ACK order
}

type simPacket struct {
	flow  int
	size  int
	sent  time.Duration
	ecn   bool
	ackAt time.Duration
}

// queueBytes is what waits ahead of a packet arriving at now, the packet
// in service included.
func (b *bottleneck) queueBytes(now time.Duration) float64 {
	if b.lastDepart <= now {
		return 0
	}
	return (b.lastDepart - now).Seconds() * b.rate.BytesPerSecond()
}

func (b *bottleneck) enqueue(now time.Duration, flow, size int) {
	q := b.queueBytes(now)
	ser := time.Duration(float64(size) * 8e9 / float64(b.rate))
	depart := max(now, b.lastDepart) + ser
	b.lastDepart = depart
	// The ACK leaves the receiver when the packet has left the port;
	// unloaded RTT = baseRTT (serialization included).
	b.acks = append(b.acks, simPacket{flow: flow, size: size, sent: now, ecn: q > b.markBytes,
		ackAt: depart + b.baseRTT - ser})
}

type simFlow struct {
	c        *nscc.Controller
	start    time.Duration
	inFlight int
	acked    int64 // bytes acked in the measurement window
}

type simResult struct {
	jain, utilization    float64
	maxQueue, meanQueue  float64 // bytes, in the measurement window, sampled at each arrival
	perFlow              []int64
	decreases, quickAdap uint64
}

// runBottleneck runs n NSCC senders with DefaultParams(rate, baseRTT, mtu),
// flow i starting at i·stagger, for total; it measures from measureFrom.
func runBottleneck(tb testing.TB, rate units.Rate, baseRTT time.Duration, mtu, n int,
	stagger, measureFrom, total time.Duration, markBytes float64) simResult {
	tb.Helper()
	p := nscc.DefaultParams(rate, baseRTT, mtu)
	b := &bottleneck{rate: rate, baseRTT: baseRTT, markBytes: markBytes}
	flows := make([]*simFlow, n)
	for i := range flows {
		flows[i] = &simFlow{start: time.Duration(i) * stagger}
	}
	var qMax, qSum float64
	var qN int
	send := func(i int, now time.Duration) {
		f := flows[i]
		for f.c.CanSend(f.inFlight, mtu) {
			if now >= measureFrom {
				q := b.queueBytes(now)
				qMax = max(qMax, q)
				qSum += q
				qN++
			}
			b.enqueue(now, i, mtu)
			f.inFlight += mtu
		}
	}
	next := 0 // next flow to start
	for {
		var now time.Duration
		startNext := next < n && (len(b.acks) == 0 || flows[next].start <= b.acks[0].ackAt)
		if startNext {
			now = flows[next].start
		} else if len(b.acks) > 0 {
			now = b.acks[0].ackAt
		} else {
			break
		}
		if now > total {
			break
		}
		if startNext {
			f := flows[next]
			f.c = nscc.New(p, now)
			send(next, now)
			next++
			continue
		}
		a := b.acks[0]
		b.acks = b.acks[1:]
		f := flows[a.flow]
		f.inFlight -= a.size
		f.c.OnAck(now, cc.AckSample{NewlyAcked: a.size, RTT: now - a.sent, RTTValid: true,
			ECN: a.ecn, InFlight: f.inFlight})
		if now >= measureFrom {
			f.acked += int64(a.size)
		}
		send(a.flow, now)
	}
	var sum, sumSq float64
	r := simResult{perFlow: make([]int64, n)}
	for i, f := range flows {
		x := float64(f.acked)
		sum += x
		sumSq += x * x
		r.perFlow[i] = f.acked
		st := f.c.Stats()
		r.decreases += st.Decreases
		r.quickAdap += st.QuickAdapts
	}
	r.jain = sum * sum / (float64(n) * sumSq)
	r.utilization = sum / ((total - measureFrom).Seconds() * rate.BytesPerSecond())
	r.maxQueue = qMax
	if qN > 0 {
		r.meanQueue = qSum / float64(qN)
	}
	return r
}

// N senders through one fake switch port converge to equal
// shares with the queue near target_qdelay (≈ 1 BDP: NSCC aims at a
// queueing delay of tq = base RTT without trimming). Without congestion
// control the windows (MaxWnd = 1.5 BDP each) would hold N·1.5 − 1 BDP in
// the queue: 2 BDP for 2 flows, 11 BDP for 8. Flows start staggered, each
// at MaxWnd, so late flows must win their share from early ones.
func TestClosedLoop(t *testing.T) {
	tests := []struct {
		name    string
		rate    units.Rate
		n       int
		stagger time.Duration
		measure time.Duration // from
		total   time.Duration
	}{
		{"lab: 1 Gbit/s, 2 flows", units.Gbit, 2, 5 * time.Millisecond, 30 * time.Millisecond, 130 * time.Millisecond},
		{"10 Gbit/s, 8 flows", 10 * units.Gbit, 8, 2 * time.Millisecond, 40 * time.Millisecond, 100 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const baseRTT, mtu = 80 * time.Microsecond, 4096
			bdp := nscc.DefaultParams(tc.rate, baseRTT, mtu).BDPBytes()
			r := runBottleneck(t, tc.rate, baseRTT, mtu, tc.n, tc.stagger, tc.measure, tc.total, bdp/2)
			t.Logf("Jain %.4f, utilization %.4f, queue max %.2f mean %.2f BDP, %d MDs, %d quick adapts, bytes per flow %v",
				r.jain, r.utilization, r.maxQueue/bdp, r.meanQueue/bdp, r.decreases, r.quickAdap, r.perFlow)
			if r.jain < 0.95 {
				t.Errorf("Jain fairness %.4f < 0.95 (bytes per flow %v)", r.jain, r.perFlow)
			}
			if r.utilization < 0.95 {
				t.Errorf("utilization %.4f < 0.95", r.utilization)
			}
			if r.meanQueue < 0.5*bdp || r.meanQueue > 1.5*bdp {
				t.Errorf("mean queue %.2f BDP, want 0.5..1.5 (target_qdelay = base RTT)", r.meanQueue/bdp)
			}
			if r.maxQueue > 2*bdp {
				t.Errorf("queue reached %.2f BDP, want ≤ 2", r.maxQueue/bdp)
			}
			if r.decreases == 0 {
				t.Error("no multiplicative decrease: the queue was never above target")
			}
		})
	}
}

// The lab's limit (doc.go): at 1 Gbit/s, 80 µs and MTU 4096 the BDP is
// 2.4 packets and cwnd cannot go below one MTU, so 8 flows hold 8 MTU in
// flight whatever NSCC says: a standing queue of 8·4096 − 10 000 = 22 768
// B (2.3 BDP, 182 µs of delay), equal shares by construction.
func TestClosedLoopWindowFloor(t *testing.T) {
	const baseRTT, mtu, n = 80 * time.Microsecond, 4096, 8
	bdp := nscc.DefaultParams(units.Gbit, baseRTT, mtu).BDPBytes()
	r := runBottleneck(t, units.Gbit, baseRTT, mtu, n, 2*time.Millisecond, 40*time.Millisecond, 140*time.Millisecond, bdp/2)
	t.Logf("Jain %.4f, queue max %.0f mean %.0f B", r.jain, r.maxQueue, r.meanQueue)
	floor := float64(n*mtu) - bdp
	if r.meanQueue < floor-mtu || r.maxQueue > floor+mtu || r.jain < 0.99 {
		t.Errorf("queue mean %.0f max %.0f B, Jain %.4f; want about %.0f B and ≥ 0.99", r.meanQueue, r.maxQueue, r.jain, floor)
	}
}
