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
