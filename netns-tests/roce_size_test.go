package netnstests

import (
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The RoCE tests measure rates and queues with the senders, the port and
// the receiver on the same 2 cores. A port faster than the hosts can feed
// measures the hosts: senders that cannot send at their Rc, per-CPU
// backlogs that fill while a softirq waits, ACKs that come late. So the
// tests first measure what this machine carries right now and choose the
// line rate from that.

// roceRates are the line rates the lab may choose, fastest first, each
// with the least share of the CPUs (lab.CPUShare) it needs: the senders, the
// receiver and the port's softirqs need every core, which one unpaced flow
// (one core) does not show. Measured here (2 cores; one unpaced flow
// carries 2.9-7 Gbit/s of payload, idle or beside one busy core): the
// fairness test passed 10 of 10 at 500 Mbit/s idle (share 0.97-1), 0 of 5
// at 500 Mbit/s beside stress-ng on one core (share about 0.6) and 3 of 3
// at 250 Mbit/s there. 1 Gbit/s failed most runs even idle.
var roceRates = []struct {
	rate     units.Rate
	minShare float64
}{
	{500 * units.Mbit, 0.85},
	{250 * units.Mbit, 0.4},
}

// roceHeadroom is the share of the capacity (one unpaced flow times the
// CPU share) a lab rate may use: the senders pace (a timer wakeup per
// burst), DCQCN's transients send above the port rate, and the receiver,
// the port's softirq and the sampling share the CPUs too.
const roceHeadroom = 0.25

var roceSizing struct {
	once     sync.Once
	capacity float64 // bit/s of payload, one unpaced flow
	share    float64 // of the CPUs this process gets (lab.CPUShare)
	err      string
}

// roceSize measures, once per test binary, the payload rate one unpaced
// RoCE flow reaches through a 10 Gbit/s port (the hosts' limit, not the
// port's), and sets roceRate to the fastest of roceRates within
// roceHeadroom of it, with the WRED thresholds, the limit and the in-flight
// bound scaled to keep their sojourns. It fails the test if even the
// slowest rate does not fit: a loaded machine would fail the tests for
// reasons that are not the fabric's.
func roceSize(t *testing.T) {
	t.Helper()
	roceSizing.once.Do(func() {
		roceSizing.share = lab.CPUShare(300 * time.Millisecond)
		ok := t.Run("calibrate", func(t *testing.T) {
			b := newRoCEBed(t, 1, qdisc.DefaultConfig(10*units.Gbit))
			qc := agent.DefaultQPConfig()
			qc.MTU = roceMTU // CC none, unpaced: as fast as the window and the CPUs allow
			f := b.dial(t, 0, qc, false)
			f.start(t, 0, false)
			time.Sleep(300 * time.Millisecond)
			r0, t0 := f.peer.Counters().RecvBytes, time.Now()
			time.Sleep(700 * time.Millisecond)
			r1, t1 := f.peer.Counters().RecvBytes, time.Now()
			f.stop(t)
			roceSizing.capacity = float64(r1-r0) * 8 / t1.Sub(t0).Seconds()
		})
		if !ok {
			roceSizing.err = "calibration run failed"
		}
	})
	if roceSizing.err != "" {
		t.Fatal(roceSizing.err)
	}
	c := roceSizing.capacity * roceSizing.share
	rate := units.Rate(0)
	for _, r := range roceRates {
		if float64(r.rate) <= roceHeadroom*c && roceSizing.share >= r.minShare {
			rate = r.rate
			break
		}
	}
	if rate == 0 {
		slow := roceRates[len(roceRates)-1]
		t.Fatalf("this machine carries %s Mbit/s of RoCE payload now (one unpaced flow, %s Mbit/s, times the %.2f of the CPUs this process gets); the slowest lab rate, %v, needs %s and a CPU share of %.2f: stop the other load and rerun",
			mbit(c), mbit(roceSizing.capacity), roceSizing.share, slow.rate, mbit(float64(slow.rate)/roceHeadroom), slow.minShare)
	}
	scale := func(atGbit units.ByteSize) units.ByteSize {
		return units.ByteSize(uint64(atGbit) * uint64(rate) / uint64(units.Gbit))
	}
	roceRate = rate
	roceMinTh, roceMaxTh, roceLimit = scale(512*units.KiB), scale(units.MiB), scale(8*units.MiB)
	roceInflight = roceBaseRTT + drainTime(roceMaxTh, rate)
	t.Logf("lab sizing: one unpaced flow carries %s Mbit/s here, this process gets %.2f of the CPUs; line rate %v (at most %.0f%% of their product), WRED min_th %d KiB, max_th %d KiB, limit %d KiB, in flight <= Rc x %v",
		mbit(roceSizing.capacity), roceSizing.share, rate, 100*roceHeadroom, roceMinTh/units.KiB, roceMaxTh/units.KiB, roceLimit/units.KiB, roceInflight)
}

// drainTime is how long b bytes take at rate.
func drainTime(b units.ByteSize, rate units.Rate) time.Duration {
	return time.Duration(float64(b) * 8 / float64(rate) * float64(time.Second))
}
