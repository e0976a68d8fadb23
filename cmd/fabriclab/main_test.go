package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
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
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate": want run, validate, plan or help`},
		{[]string{"plan", "../../vagrant/lab.yaml"}, 2, "", "-node NAME is required"},
		{[]string{"plan", "../../vagrant/lab.yaml", "-node", "s9"}, 2, "", `node: "s9": not a node of`},
		{[]string{"plan", "../../vagrant/lab.yaml", "-node", "sw"}, 0, "port eth2 at 1gbit (fabriclabd: virtual queue)", ""},
		{[]string{"plan", "../../vagrant/lab-wan.yaml", "-node", "pe1"}, 0, "netem eth2 delay 5ms loss 0", ""},
		{[]string{"validate", "../../vagrant/lab-wan.yaml"}, 0, "4 nodes, 3 links", ""},
		{[]string{"validate", "nonexistent.yaml"}, 2, "", "no such file"},
		{[]string{"validate", "../../host/labfile/examples/ecnsharp.yaml"}, 0, "variant ecnsharp: 1 port edit(s)", ""},
		{[]string{"validate", "../../host/labfile/examples/wan-experiment.yaml"}, 0, "goal lossless: lost_packets of pe-rate <= 0 (mean over the runs)", ""},
		{[]string{"run", "../../host/labfile/examples/ecnsharp.yaml", "-runs", "-1"}, 2, "", "-runs -1: want 1..1000"},
		{[]string{"run", "../../host/labfile/examples/incast.yaml", "-timescale", "2000"}, 2, "", `-timescale 2000: ../../host/labfile/examples/incast.yaml: timescale: "2000": want 1..1000`},
		{[]string{"run", "../../host/labfile/examples/incast.yaml", "-timescale", "600"}, 2, "", `timescale: "600": the report interval 250ms becomes 150s, over perf's 60s: want at most 240`},
		{[]string{"run", "../../host/labfile/examples/ecnsharp.yaml", "-variants", "step-tail,red"}, 2, "", `has no variant "red" (its variants: step-tail, step-avg, codel, tcn, ecnsharp)`},
	}
	for _, e := range examples {
		cases = append(cases, tc{[]string{"validate", e}, 0, filepath.Base(e), ""})
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errb.String(), c.err) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d, %q, %q", c.args, code, out.String(), errb.String(), c.code, c.out, c.err)
		}
	}
}
