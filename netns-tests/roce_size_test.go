package netnstests

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The RoCE and UET tests measure rates and queues with the senders, the
// port and the receiver on the same 2 cores. A fabric faster than the
// hosts can feed measures the hosts: senders that cannot send when their
// window or Rc allows, per-CPU backlogs that fill while a softirq waits,
// ACKs that come late, a VM that stops a CPU for over a millisecond. So
// every test runs one fabric, fabricRate with its thresholds in bytes and
// its round trips in time, and the lab slows it down in time by a factor
// the machine needs right now (units.Timescale, issue 26 §2): rates over
// k, times times k, bytes as they are. The dimensionless results (FCT /
// ideal, utilization, queue / BDP, marks per packet) stay those of the
// one fabric, on a quiet machine and a loaded one; what the host still
// takes is measured (host/hostlost) and shown beside them.

// fabricRate is the fabric the tests model: the bottleneck port's and
// every sender's line rate before the time scale.
const fabricRate = 500 * units.Mbit

// labScales are the time scales the lab may choose, least first, each
// with the least share of the CPUs (lab.CPUShare) it needs: the senders,
// the receiver and the port's softirqs need every core, which one unpaced
// flow (one core, and since UDP GSO a cheap one: 3.6 Gbit/s of payload
// here) does not show. Never 1: at 500 Mbit/s on the wire even a quiet
// machine took 5-9 % of the UET incasts' time (host/hostlost) and their
// tails came out 1.08-1.10 × ideal against htsim's 1.003; at 2 it takes
// well under 2 %. Beside stress-ng --cpu 2 --cpu-load 50 the share reads
// 0.5-0.67: 4.
var labScales = []struct {
	k        units.Timescale
	minShare float64
}{
	{2, 0.8},
	{4, 0.3},
	{8, 0.15},
}

// roceHeadroom is the share of the capacity (one unpaced flow times the
// CPU share) the lab's wire rate may use: the senders pace (a timer
// wakeup per burst), DCQCN's transients send above the port rate, and the
// receiver, the port's softirq and the sampling share the CPUs too.
const roceHeadroom = 0.25

// envTimescale forces the time scale (FABRICLAB_TIMESCALE=4): to
// reproduce a run at the scale another machine chose, or to measure one
// scale against another.
const envTimescale = "FABRICLAB_TIMESCALE"

var roceSizing struct {
	once     sync.Once
	capacity float64 // bit/s of payload, one unpaced flow
	share    float64 // of the CPUs this process gets (lab.CPUShare)
	err      string
}

// roceSize measures, once per test binary, the payload rate one unpaced
// RoCE flow reaches through a 10 Gbit/s port (the hosts' limit, not the
// port's), and picks the least time scale whose wire rate fits within
// roceHeadroom of it: labScale, and roceRate, the wire rate, from it. It
// fails the test if even the greatest does not fit: a loaded machine
// would fail the tests for reasons that are not the fabric's.
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
	k, forced, err := forcedScale()
	if err != nil {
		t.Fatal(err)
	}
	if !forced {
		for _, s := range labScales {
			if float64(s.k.Rate(fabricRate)) <= roceHeadroom*c && roceSizing.share >= s.minShare {
				k = s.k
				break
			}
		}
	}
	if k == 0 {
		slow := labScales[len(labScales)-1]
		t.Fatalf("this machine carries %s Mbit/s of RoCE payload now (one unpaced flow, %s Mbit/s, times the %.2f of the CPUs this process gets); the greatest time scale, %v (%v on the wire), needs %s and a CPU share of %.2f: stop the other load and rerun",
			mbit(c), mbit(roceSizing.capacity), roceSizing.share, slow.k, slow.k.Rate(fabricRate), mbit(float64(slow.k.Rate(fabricRate))/roceHeadroom), slow.minShare)
	}
	setLabScale(k)
	how := fmt.Sprintf("the least that fits %.0f%% of their product", 100*roceHeadroom)
	if forced {
		how = "forced by " + envTimescale
	}
	t.Logf("lab sizing: one unpaced flow carries %s Mbit/s here, this process gets %.2f of the CPUs; fabric %v slowed %v× (%s): %v on the wire; WRED min_th %d KiB, max_th %d KiB, limit %d KiB",
		mbit(roceSizing.capacity), roceSizing.share, fabricRate, k, how, roceRate, roceMinTh/units.KiB, roceMaxTh/units.KiB, roceLimit/units.KiB)
}

// forcedScale reads envTimescale.
func forcedScale() (units.Timescale, bool, error) {
	v := os.Getenv(envTimescale)
	if v == "" {
		return 0, false, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	k := units.Timescale(f)
	if err == nil {
		err = k.Validate()
	}
	if err != nil || f == 0 {
		return 0, false, fmt.Errorf("%s=%q: want a time scale 1..%d", envTimescale, v, units.MaxTimescale)
	}
	return k, true, nil
}

// setLabScale sets the time scale and what follows from it.
func setLabScale(k units.Timescale) {
	labScale = k
	roceRate = k.Rate(fabricRate)
}

// fabric is d, a time on the fabric, on the slowed fabric: the wall time
// it takes.
func fabric(d time.Duration) time.Duration { return labScale.Time(d) }

// drainTime is how long b bytes take at rate.
func drainTime(b units.ByteSize, rate units.Rate) time.Duration {
	return time.Duration(float64(b) * 8 / float64(rate) * float64(time.Second))
}
