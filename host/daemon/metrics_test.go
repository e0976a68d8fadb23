package daemon

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/dispatch"
)

// fieldsCollector emits what a server and a flow emit for the families
// they share, as Collect does.
type fieldsCollector struct{}

func (fieldsCollector) Describe(chan<- *prometheus.Desc) {}

func (fieldsCollector) Collect(ch chan<- prometheus.Metric) {
	e := &emitter{ch: ch, descs: map[string]*prometheus.Desc{}}
	for _, kind := range []string{"server", "flow"} {
		ol, ov := owner(kind, kind+"-1")
		e.fields("qp", agent.Counters{NPCNPSent: 3}, append(ol, "qpn"), append(ov, "0x10"))
		e.fields("rocev2", agent.AgentCounters{}, ol, ov)
		e.fields("uet", pds.Counters{NacksReceived: map[string]uint64{"TRIMMED": 2}}, ol, ov)
	}
	e.fields("port", qdisc.ClassStats{BacklogBytes: 5}, []string{"port", "class"}, []string{"eth1", "3"})
	dispatcherStatus(e, dispatch.Status{Attached: true, Ports: 2, NPs: 1, EmptySlot: 4})
}

// TestMetricFamiliesGather: the families servers and flows share gather
// without an error (promhttp answers 500 on one), each with one set of
// label names; counters end in _total, levels are gauges.
func TestMetricFamiliesGather(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(fieldsCollector{})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetType().String()
		names := map[int]bool{}
		for _, m := range mf.GetMetric() {
			names[len(m.GetLabel())] = true
		}
		if len(names) > 1 {
			t.Errorf("%s: series with different label sets", mf.GetName())
		}
	}
	for name, typ := range map[string]string{
		"fabriclab_qp_np_cnp_sent_total":                  "COUNTER",
		"fabriclab_rocev2_icrc_errors_total":              "COUNTER",
		"fabriclab_uet_nacks_received_total":              "COUNTER",
		"fabriclab_port_backlog_bytes":                    "GAUGE",
		"fabriclab_port_max_backlog_bytes":                "GAUGE",
		"fabriclab_port_ce_marked_ect0_total":             "COUNTER",
		"fabriclab_port_host_queue_entered_packets_total": "COUNTER",
	} {
		if got[name] != typ {
			t.Errorf("%s: %q, want %s", name, got[name], typ)
		}
	}
}

// identityCollector emits a target PDC's and a CCC's counters.
type identityCollector struct{}

func (identityCollector) Describe(chan<- *prometheus.Desc) {}

func (identityCollector) Collect(ch chan<- prometheus.Metric) {
	e := &emitter{ch: ch, descs: map[string]*prometheus.Desc{}}
	e.fields("pdc", pds.TargetStats{SPDCID: 7, PDC: 9, JobID: 3, Received: pds.Received{Messages: 4}}, []string{"server", "src", "spdcid", "pdc", "job_id"}, []string{"s", "198.18.0.1", "7", "9", "3"})
	e.fields("ccc", pds.CCCInfo{TC: 3, Window: 4096}, []string{"flow", "src", "dst", "tc"}, []string{"f", "a", "b", "3"})
}

// TestIdentityFieldsAreLabels: a PDC's IDs and a CCC's TC and state are
// labels or nothing, not metrics.
func TestIdentityFieldsAreLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(identityCollector{})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	for _, name := range []string{"fabriclab_pdc_spdcid_total", "fabriclab_pdc_pdc_total", "fabriclab_pdc_job_id_total", "fabriclab_ccc_tc_total", "fabriclab_ccc_state_total"} {
		if got[name] {
			t.Errorf("%s exported", name)
		}
	}
	for _, name := range []string{"fabriclab_pdc_messages_total", "fabriclab_ccc_cwnd"} {
		if !got[name] {
			t.Errorf("%s missing (have %v)", name, got)
		}
	}
}

// TestMetricsLint: the families pass promtool check metrics' lint (base
// units, counters and gauges by meaning, help on every family).
func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(fieldsCollector{}, identityCollector{})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}
