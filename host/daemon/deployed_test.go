package daemon

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/qdisc"
)

// emitFunc is a collector that emits what f emits.
type emitFunc func(e *emitter)

func (emitFunc) Describe(chan<- *prometheus.Desc) {}
func (f emitFunc) Collect(ch chan<- prometheus.Metric) {
	f(&emitter{ch: ch, descs: map[string]*prometheus.Desc{}})
}

// scrapeOf is what /metrics would serve of f's metrics, parsed back.
func scrapeOf(t *testing.T, f emitFunc) Metrics {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(f)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	m, err := ParseMetrics(&b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestReadFieldsRoundTrip: a class's counters and a QP's, exported as the
// collector exports them, read back to the same values (nanoseconds via
// seconds, gauges and counters, nested structs, the sojourn histogram),
// and series summed over the QPs a label selects.
func TestReadFieldsRoundTrip(t *testing.T) {
	cs := qdisc.ClassStats{Class: 3, Name: "roce", EnqueuedPackets: 12345, ArrivedECT0: 12000, ArrivedNotECT: 345, CEMarkedECT0: 678,
		DroppedLimitPackets: 9, PPFCStopsSent: 77, MaxBacklogBytes: 1 << 20, SojournSum: 1234567 * time.Microsecond, SojournSamples: 12336,
		RemarkedPackets: 5, Host: qdisc.HostQueueStats{DroppedPackets: 4, WaitSum: 3 * time.Millisecond}}
	cs.Sojourn[3], cs.Sojourn[10], cs.Sojourn[20] = 100, 12000, 236
	q1 := agent.Counters{NPCNPSent: 10, NPECNMarkedRoCEPackets: 20, RPCNPHandled: 3, TxPackets: 1000, PPFCPausedNs: 2_500_000}
	q2 := agent.Counters{NPCNPSent: 1, NPECNMarkedRoCEPackets: 2, RPCNPHandled: 4, TxPackets: 500}
	m := scrapeOf(t, func(e *emitter) {
		l, v := []string{"port", "class", "name"}, []string{"eth2", "3", "roce"}
		e.fields("port", cs, l, v)
		e.sojourn(&cs, l, v)
		ql := []string{"server", "flow", "qpn", "peer", "peer_qpn"}
		e.fields("qp", q1, ql, []string{"", "f1", "0x11", "198.18.0.2", "0x21"})
		e.fields("qp", q2, ql, []string{"", "f1", "0x12", "198.18.0.2", "0x22"})
		e.fields("qp", q2, ql, []string{"", "f2", "0x13", "198.18.0.3", "0x23"})
	})
	var back qdisc.ClassStats
	back.Class, back.Name = 3, "roce"
	want := map[string]string{"port": "eth2", "class": "3"}
	if !readFields("port", m, want, reflect.ValueOf(&back).Elem(), "") {
		t.Fatal("no series matched")
	}
	readSojourn(m, want, &back)
	back.Curve = cs.Curve
	if !reflect.DeepEqual(back, cs) {
		t.Errorf("read back\n%+v\nwant\n%+v", back, cs)
	}
	var qs agent.Counters
	readFields("qp", m, map[string]string{"flow": "f1"}, reflect.ValueOf(&qs).Elem(), "")
	sum := q1
	sum.Add(&q2)
	if qs != sum {
		t.Errorf("f1's QPs summed:\n%+v\nwant\n%+v", qs, sum)
	}
	if got := labelValues(m, "fabriclab_qp_tx_packets_total", map[string]string{"flow": "f1"}, "qpn"); !reflect.DeepEqual(got, []string{"0x11", "0x12"}) {
		t.Errorf("f1's QPNs %v", got)
	}
	var none qdisc.ClassStats
	if readFields("port", m, map[string]string{"port": "eth9"}, reflect.ValueOf(&none).Elem(), "") {
		t.Error("a port with no series matched")
	}
}

// TestDelta: counters and histograms over a window, a counter that went
// back (a restart) whole, a series new in the window whole, gauges as
// they are now, a maximum since the start left out.
func TestDelta(t *testing.T) {
	at := func(enq, marked, maxBacklog uint64, sojourn [3]uint64, qpTx uint64, qp bool) Metrics {
		cs := qdisc.ClassStats{EnqueuedPackets: enq, CEMarkedECT0: marked, MaxBacklogBytes: maxBacklog, BacklogBytes: 7}
		copy(cs.Sojourn[10:13], sojourn[:])
		return scrapeOf(t, func(e *emitter) {
			l, v := []string{"port", "class", "name"}, []string{"eth2", "3", ""}
			e.fields("port", cs, l, v)
			e.sojourn(&cs, l, v)
			if qp {
				e.fields("qp", agent.Counters{TxPackets: qpTx}, []string{"flow", "qpn"}, []string{"f1", "0x11"})
			}
		})
	}
	before := at(1000, 100, 5000, [3]uint64{10, 20, 30}, 0, false)
	after := at(1500, 90, 6000, [3]uint64{15, 20, 40}, 400, true)
	d := Delta(before, after)
	var cs qdisc.ClassStats
	want := map[string]string{"port": "eth2", "class": "3"}
	readFields("port", d, want, reflect.ValueOf(&cs).Elem(), "")
	readSojourn(d, want, &cs)
	if cs.EnqueuedPackets != 500 || cs.CEMarkedECT0 != 90 || cs.MaxBacklogBytes != 0 || cs.BacklogBytes != 7 {
		t.Errorf("enqueued %d (want 500), marked %d (went back: 90), max backlog %d (left out: 0), backlog %d (a gauge: 7)",
			cs.EnqueuedPackets, cs.CEMarkedECT0, cs.MaxBacklogBytes, cs.BacklogBytes)
	}
	if cs.Sojourn[10] != 5 || cs.Sojourn[11] != 0 || cs.Sojourn[12] != 10 {
		t.Errorf("sojourn buckets %v, want 5 0 10", cs.Sojourn[10:13])
	}
	var qc agent.Counters
	readFields("qp", d, map[string]string{"flow": "f1"}, reflect.ValueOf(&qc).Elem(), "")
	if qc.TxPackets != 400 {
		t.Errorf("a QP new in the window: tx %d, want 400", qc.TxPackets)
	}
}
