package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/host/labfile"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestCommands(t *testing.T) {
	examples, _ := filepath.Glob("../../host/labfile/examples/*.yaml")
	if len(examples) < 4 {
		t.Fatalf("examples: %v", examples)
	}
	type tc struct {
		args     []string
		code     int
		out, err string
	}
	cases := []tc{
		{[]string{"help"}, 0, "fabriclab plan LAB.yaml -node NAME", ""},
		{[]string{}, 2, "", "usage:"},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate": want run, demo, check, validate, plan or help`},
		{[]string{"check"}, 2, "", "fabriclab check: no lab file given (or -result DIR/result.json)"},
		{[]string{"check", "a.yaml", "-result", "r.json"}, 2, "", "a lab file (a.yaml) or -result (r.json), not both"},
		{[]string{"check", "../../host/labfile/examples/ecnsharp.yaml", "-runs", "3"}, 2, "", "check judges one run: -variant V, not -runs or -variants"},
		{[]string{"check", "../../host/labfile/examples/ecnsharp.yaml", "-variant", "red"}, 2, "", "-variant red: ecnsharp has no such variant"},
		{[]string{"check", "-result", "nonexistent.json"}, 2, "", "no such file"},
		{[]string{"demo", "-print"}, 0, "name: demo\n", ""},
		{[]string{"demo", "uet", "-print"}, 0, "name: demo-uet\n", ""},
		{[]string{"demo", "-print", "tcp"}, 0, "transport: tcp, cc: cubic", ""},
		{[]string{"demo", "rdma"}, 2, "", `fabriclab demo: "rdma": want roce, uet or tcp`},
		{[]string{"demo", "uet", "tcp"}, 2, "", "one traffic kind at a time (got uet and tcp)"},
		{[]string{"demo", "-timescale", "2000"}, 2, "", `-timescale 2000: demo.yaml: timescale: "2000": want 1..1000`},
		{[]string{"demo", "-t", "-1s"}, 2, "", "-t -1s: want a positive duration"},
		{[]string{"plan", "../../vagrant/lab.yaml"}, 2, "", "-node NAME is required"},
		{[]string{"plan", "../../vagrant/lab.yaml", "-node", "s9"}, 2, "", `node: "s9": not a node of`},
		{[]string{"plan", "../../vagrant/lab.yaml", "-node", "sw"}, 0, "port eth2 at 1gbit (fabriclabd: virtual queue)", ""},
		{[]string{"plan", "../../vagrant/lab-wan.yaml", "-node", "pe1"}, 0, "netem eth2 delay 5ms loss 0", ""},
		{[]string{"validate", "../../vagrant/lab-wan.yaml"}, 0, "4 nodes, 3 links", ""},
		{[]string{"validate", "nonexistent.yaml"}, 2, "", "no such file"},
		{[]string{"validate", "../../host/labfile/examples/ecnsharp.yaml"}, 0, "variant ecnsharp: 1 port edit(s)", ""},
		{[]string{"validate", "../../host/labfile/examples/demo.yaml"}, 0, "host queues (senders wait at): s1 128kb, s2 128kb, s3 128kb, r 128kb", ""},
		{[]string{"validate", "../../host/labfile/examples/wan-experiment.yaml"}, 0, "goal lossless: lost_packets of pe-rate <= 0 (mean over the runs)", ""},
		{[]string{"run", "../../host/labfile/examples/ecnsharp.yaml", "-runs", "-1"}, 2, "", "-runs -1: want 1..1000"},
		{[]string{"run", "../../host/labfile/examples/incast.yaml", "-timescale", "2000"}, 2, "", `-timescale 2000: ../../host/labfile/examples/incast.yaml: timescale: "2000": want 1..1000`},
		{[]string{"run", "../../host/labfile/examples/incast.yaml", "-timescale", "600"}, 2, "", `timescale: "600": the report interval 250ms becomes 150s, over perf's 60s: want at most 240`},
		{[]string{"run", "../../host/labfile/examples/ecnsharp.yaml", "-variants", "step-tail,red"}, 2, "", `has no variant "red" (its variants: step-tail, step-avg, codel, tcn, ecnsharp)`},
	}
	for _, e := range examples {
		cases = append(cases, tc{[]string{"validate", e}, 0, filepath.Base(e), ""})
	}
	// The demo's files are the examples' own, built in.
	for _, d := range demos {
		want, err := os.ReadFile(filepath.Join("../../host/labfile/examples", d.file))
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, tc{[]string{"demo", d.traffic, "-print"}, 0, string(want), ""})
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errb.String(), c.err) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d, %q, %q", c.args, code, out.String(), errb.String(), c.code, c.out, c.err)
		}
	}
}

// TestDemoTimescale: the CPU check slows the demo's fabric only when
// other load takes the CPUs from it.
func TestDemoTimescale(t *testing.T) {
	for _, c := range []struct {
		share float64
		want  float64
	}{{1, 1}, {0.9, 1}, {minCPUShare, 1}, {0.84, busyTimescale}, {0.5, busyTimescale}} {
		if got := float64(demoTimescale(c.share)); got != c.want {
			t.Errorf("share %.2f: timescale %v, want %v", c.share, got, c.want)
		}
	}
}

// check -result judges a run's result.json: exit 3 and the layer's name
// when one is silent, the report as JSON with -json.
func TestCheckResult(t *testing.T) {
	cfg := qdisc.DefaultConfig(500 * units.Mbit)
	st := &qdisc.Stats{Classes: make([]qdisc.ClassStats, qdisc.NumClasses)}
	st.Classes[qdisc.ClassRoCE].ArrivedECT0, st.Classes[qdisc.ClassRoCE].CEMarkedECT0 = 5000, 900
	res := labfile.Result{Schema: labfile.ResultSchema, Ports: []labfile.PortResult{{Name: "sw:r", Stats: st, Config: &cfg}},
		Flows: []labfile.FlowResult{{Name: "f1", From: "s1", To: "r", Transport: labfile.TransportRoCEv2, CC: "dcqcn",
			Path: []labfile.FlowHop{{Port: "sw:r", Class: int(qdisc.ClassRoCE)}}, TxPackets: 5000, CEArrived: 400, NP: "off"}}}
	b, err := json.Marshal(&res)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "result.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"check", "-result", path}, &out, &errb); code != exitSilent || !strings.Contains(out.String(), "silent: NP") ||
		!strings.Contains(out.String(), "np: off at r") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	out.Reset()
	if code := run([]string{"check", "-json", "-result", path}, &out, &errb); code != exitSilent {
		t.Errorf("-json: exit %d", code)
	}
	var c labfile.CheckReport
	if err := json.Unmarshal(out.Bytes(), &c); err != nil || c.Schema != labfile.CheckSchema || c.Flows[0].Layer != labfile.LayerNP {
		t.Errorf("-json: %v %+v", err, c)
	}
}
