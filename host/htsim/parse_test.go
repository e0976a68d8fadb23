package htsim

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The fixtures are one real run (htsim 40ccb05): 4 × 256 KiB → 1 at
// 500 Mbit/s, 1 ms, scaled, trimming, NSCC, seed 1 (fixtureScenario).
// incast4.out is htsim_uec's output; incast4.idmap an excerpt of its
// idmap.txt; incast4.log the senders' finishes and every 40th sample of
// the receiver's queue (ID 52) from parse_output -ascii, with 3 lines of
// other queues.
func fixtureScenario() Scenario {
	s := labTrim(4, 500*units.Mbit, Scaled)
	s.FlowBytes = 256 * units.KiB
	return s
}

// fixturePeriod is the fixture log's sample period: 40 of the run's.
const fixturePeriod = 40

func open(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestParseOutput(t *testing.T) {
	o, err := parseOutput(open(t, "incast4.out"), 4)
	if err != nil {
		t.Fatal(err)
	}
	want := Counters{NewPackets: 260, Retransmits: 64, ACKs: 249, NACKs: 64}
	if !o.haveCounters || o.counters != want {
		t.Errorf("counters %+v, want %+v", o.counters, want)
	}
	if o.unloadedRTTUs != 12 {
		t.Errorf("unloaded RTT %v µs, want 12", o.unloadedRTTUs)
	}
	wantFinished := map[int]float64{0: 185.611, 1: 206.129, 2: 232.496, 3: 189.394}
	if len(o.finishedUs) != 4 {
		t.Errorf("finished %v, want %v", o.finishedUs, wantFinished)
	}
	for src, us := range wantFinished {
		if o.finishedUs[src] != us {
			t.Errorf("sender %d finished at %v µs, want %v", src, o.finishedUs[src], us)
		}
	}
	// Flows to another receiver are not the incast's.
	if o, _ := parseOutput(open(t, "incast4.out"), 5); len(o.finishedUs) != 0 {
		t.Errorf("receiver 5: finished %v, want none", o.finishedUs)
	}
}

// Lines of native runs (500 Mbit/s, 1 ms): htsim's clock prints a '.'
// every 50 ms of its time and a '|' every 10th.
func TestParseOutputAfterTheClocksDots(t *testing.T) {
	out := "Starting simulation\n" +
		"Flow Uec_0_8 flowId 1000000001 uecSrc 0 starting at 0\n" +
		"....Flow Uec_0_8 flowId 1000000001 uecSrc 0 finished at 234954 total messages 1 total packets 519 RTS 0 total bytes 2099874\n" +
		".Flow Uec_1_8 flowId 1000000003 uecSrc 1 finished at 251546 total messages 1 total packets 519 RTS 0 total bytes 2099874\n" +
		".Done\n" +
		"New: 4152 Rtx: 802 RTS: 0 Bounced: 0 ACKs: 4093 NACKs: 802 Pulls: 0 sleek_pkts: 0\n"
	o, err := parseOutput(strings.NewReader(out), 8)
	if err != nil || len(o.finishedUs) != 2 || o.finishedUs[0] != 234954 || o.finishedUs[1] != 251546 || o.counters.NACKs != 802 {
		t.Errorf("parseOutput = %+v, %v", o, err)
	}
	out = "|Flow Uec_15_16 flowId 1000000031 uecSrc 15 finished at 550743 total messages 1 total packets 519 RTS 0 total bytes 2099874\n"
	if o, err := parseOutput(strings.NewReader(out), 16); err != nil || o.finishedUs[15] != 550743 {
		t.Errorf("after a '|': parseOutput = %+v, %v", o, err)
	}
}

func TestParseOutputWithoutCounters(t *testing.T) {
	o, err := parseOutput(strings.NewReader("Starting simulation\nFlow Uec_0_4 flowId 1 uecSrc 0 starting at 0\n"), 4)
	if err != nil || o.haveCounters || len(o.finishedUs) != 0 {
		t.Errorf("parseOutput = %+v, %v: want no counters, no finish", o, err)
	}
	if _, err := parseOutput(strings.NewReader("New: 1 Rtx: x RTS: 0 Bounced: 0 ACKs: 0 NACKs: 0 Pulls: 0 sleek_pkts: 0\n"), 4); err == nil {
		t.Error("a bad counter parsed")
	}
}

func TestParseIDMap(t *testing.T) {
	m, err := parseIDMap(open(t, "incast4.idmap"), 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if m.queue != 52 {
		t.Errorf("queue %d, want 52 (LS1->DST4(0))", m.queue)
	}
	want := map[int64]int{475: 0, 476: 0, 479: 1, 480: 1, 483: 2, 484: 2, 487: 3, 488: 3}
	if len(m.senders) != len(want) {
		t.Errorf("senders %v, want %v", m.senders, want)
	}
	for id, src := range want {
		if got, ok := m.senders[id]; !ok || got != src {
			t.Errorf("id %d: sender %d, %v; want %d", id, got, ok, src)
		}
	}
	if _, err := parseIDMap(open(t, "incast4.idmap"), 2, 4); err == nil || err.Error() != "htsim idmap: no queue LS2->DST4(0)" {
		t.Errorf("another ToR: %v", err)
	}
}

func TestResultFromFixtures(t *testing.T) {
	p := mustPlan(t, fixtureScenario())
	if p.Receiver != 4 || p.HostsPerToR != 4 || p.SamplePeriodPs != 204511 {
		t.Fatalf("plan: receiver %d, %d hosts per ToR, sample period %d ps: not the fixtures' run", p.Receiver, p.HostsPerToR, p.SamplePeriodPs)
	}
	p.SamplePeriodPs *= fixturePeriod
	o, err := parseOutput(open(t, "incast4.out"), p.Receiver)
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseIDMap(open(t, "incast4.idmap"), p.Receiver/p.HostsPerToR, p.Receiver)
	if err != nil {
		t.Fatal(err)
	}
	lr, err := parseLog(open(t, "incast4.log"), m)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.result(o, lr)
	if err != nil {
		t.Fatal(err)
	}
	// htsim's ns × 1000/12: 185.611 µs is 15.467583 ms of the lab's.
	wantFCT := []time.Duration{15_467_583, 17_177_417, 19_374_667, 15_782_833}
	for i, f := range r.Flows {
		if f.Sender != i || f.FCT != wantFCT[i] {
			t.Errorf("flow %d: sender %d, FCT %v; want %d, %v", i, f.Sender, f.FCT, i, wantFCT[i])
		}
	}
	// Ideal: 4 × 262 144 × 4110/4046 × 192 ps = 204.511 µs (17.0426 ms).
	if r.TailFCT != 19_374_667 || r.MeanFCT != 16_950_625 || !near(r.TailOverIdeal, 232.496/204.5112) || !near(r.MeanOverIdeal, 203.4075/204.5112) {
		t.Errorf("tail %v (%.4f), mean %v (%.4f)", r.TailFCT, r.TailOverIdeal, r.MeanFCT, r.MeanOverIdeal)
	}
	if r.Counters.NACKs != 64 || r.Counters.Retransmits != 64 {
		t.Errorf("counters %+v", r.Counters)
	}
	// 28 samples (every 40th of a 204.511-ns period up to 232.496 µs):
	// the 14th is 57 540 B, the 28th 62 076 B.
	want := Queue{Samples: 28, P50Bytes: 57540, P99Bytes: 62076, MaxBytes: 62076, P50BDPs: 57540 / 62500.0, P99BDPs: 62076 / 62500.0, MaxBDPs: 62076 / 62500.0}
	if !nearQueue(r.Queue, want) {
		t.Errorf("queue %+v, want %+v", r.Queue, want)
	}
}

// The sampler writes nothing before the queue's first packet; samples
// after the last flow's finish are not the run's.
func TestQueueCountsTheEmptyStartAndStopsAtTheTail(t *testing.T) {
	p := Plan{SamplePeriodPs: 10, BDPBytes: 100}
	samples := []queueSample{{40, 50, 60}, {50, 200, 300}, {60, 100, 250}, {70, 0, 900}}
	q := p.queue(samples, 65)
	// 0, 0, 0 (10, 20, 30), 50, 200, 100.
	want := Queue{Samples: 6, P50Bytes: 0, P99Bytes: 200, MaxBytes: 300, P50BDPs: 0, P99BDPs: 2, MaxBDPs: 3}
	if q != want {
		t.Errorf("queue %+v, want %+v", q, want)
	}
}

func TestResultNeedsEveryFinish(t *testing.T) {
	p := mustPlan(t, fixtureScenario())
	lr := logRecords{finishPs: map[int]int64{0: 1, 1: 1, 3: 1}}
	if _, err := p.result(output{finishedUs: map[int]float64{}}, lr); err == nil || !strings.Contains(err.Error(), "no finish of sender 2") {
		t.Errorf("result = %v", err)
	}
}

func TestResultChecksTheUnloadedRTT(t *testing.T) {
	p := mustPlan(t, fixtureScenario())
	lr := logRecords{finishPs: map[int]int64{0: 1, 1: 1, 2: 1, 3: 1}}
	if _, err := p.result(output{unloadedRTTUs: 12.0003}, lr); err == nil || !strings.Contains(err.Error(), "unloaded RTT 12.0003 µs, planned 12 µs") {
		t.Errorf("result = %v", err)
	}
}

func TestParseLogRejectsAMalformedSample(t *testing.T) {
	m := ids{queue: 52}
	for _, line := range []string{
		"0.000008180 Type QUEUE_APPROX ID 52 Ev RANGE LastQ x MinQ 0 MaxQ 0",
		"0.000008180 Type QUEUE_APPROX ID 52 Ev RANGE LastQ 1",
		"-1 Type QUEUE_APPROX ID 52 Ev RANGE LastQ 1 MinQ 0 MaxQ 0",
	} {
		if _, err := parseLog(strings.NewReader(line+"\n"), m); err == nil {
			t.Errorf("%q parsed", line)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

func nearQueue(a, b Queue) bool {
	return a.Samples == b.Samples && a.P50Bytes == b.P50Bytes && a.P99Bytes == b.P99Bytes && a.MaxBytes == b.MaxBytes &&
		near(a.P50BDPs, b.P50BDPs) && near(a.P99BDPs, b.P99BDPs) && near(a.MaxBDPs, b.MaxBDPs)
}
