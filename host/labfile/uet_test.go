//go:build linux

package labfile

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestUETIncastPlan: the incast examples' receiver runs at its link's
// rate with its flows' base RTT (its RCCC pacer's), takes the last hop's
// trimmed DSCP as TRIMMED_LASTHOP, and each variant runs the flows under
// its congestion control.
func TestUETIncastPlan(t *testing.T) {
	for _, c := range []struct {
		file    string
		senders int
		trim    uint8
	}{{"uet-incast-deep.yaml", 8, 0}, {"uet-incast-trim.yaml", 8, 9}, {"uet-incast-trim-16.yaml", 16, 9}} {
		f, err := Load("examples/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		p := f.Plan()
		if len(p.Servers) != 1 || len(p.Flows) != c.senders || len(p.Ports) != 1 {
			t.Fatalf("%s: %d servers, %d flows, %d ports", c.file, len(p.Servers), len(p.Flows), len(p.Ports))
		}
		sp := p.Servers[0]
		if sp.LineRate != 500*units.Mbit || sp.BaseRTT != time.Millisecond || sp.Timescale != 8 || sp.TrimLastHopDSCP != c.trim || sp.TrimDSCP != 0 {
			t.Errorf("%s: server %+v: want 500mbit, 1ms, timescale 8, last-hop trim DSCP %d", c.file, sp, c.trim)
		}
		// A path that trims runs NSCC at tq 0.75 × base RTT
		// (nscc.Params.Trimming), as pds does for an endpoint that knows
		// the trimmed DSCPs.
		knobs := map[bool]string{false: "[]", true: "[target_qdelay=750us qa_threshold=3ms]"}[c.trim != 0]
		for _, fp := range p.Flows {
			if len(fp.Ports) != 1 || fp.LastPort != 0 || fp.Client.MTU != 4096 || fp.Client.BaseRTT != time.Millisecond || fp.Client.UETCC != pds.CCNSCC ||
				fmt.Sprint(fp.Client.NSCCKnobs) != knobs {
				t.Errorf("%s: flow %s: ports %v (last %d), mtu %d, base RTT %v, cc %v, nscc knobs %v", c.file, fp.Flow.Name, fp.Ports, fp.LastPort, fp.Client.MTU, fp.Client.BaseRTT, fp.Client.UETCC, fp.Client.NSCCKnobs)
			}
		}
		for _, vp := range p.Variants {
			want, _ := pds.ParseCCMode(vp.Name)
			for _, fp := range vp.Plan.Flows {
				if fp.Client.UETCC != want || fp.Flow.CC != vp.Name {
					t.Errorf("%s: variant %s: flow %s runs %v (%s)", c.file, vp.Name, fp.Flow.Name, fp.Client.UETCC, fp.Flow.CC)
				}
			}
		}
		if f.Flows[0].CC != "nscc" {
			t.Errorf("%s: a variant changed the file's flow: %s", c.file, f.Flows[0].CC)
		}
	}
}

// twoHops is a sender, a leaf and a spine switch and a receiver: two
// ports on the path, the spine's in front of the receiver.
const twoHops = `nodes:
  - {name: s, kind: host}
  - {name: leaf, kind: switch}
  - {name: spine, kind: switch}
  - {name: r, kind: host}
links:
  - {a: s, b: leaf, mtu: 9000}
  - {a: leaf, b: spine, rate: 1gbit, mtu: 9000}
  - {a: spine, b: r, rate: 500mbit, mtu: 9000}
ports:
  - {port: leaf:spine, tc: ["3:trim,trim-dscp=10"]}
  - {port: spine:r, tc: ["3:trim"]}
flows:
  - {name: f, from: s, to: r, transport: uet, size: 1mb}
`

// TestTrimDSCPs: the receiver takes the last hop's trim DSCP as
// TRIMMED_LASTHOP and the others' as TRIMMED; two hops trimming into one
// DSCP cannot be told apart and are refused.
func TestTrimDSCPs(t *testing.T) {
	f, err := Parse("t.yaml", []byte(twoHops))
	if err != nil {
		t.Fatal(err)
	}
	p := f.Plan()
	fp, sp := p.Flows[0], p.Servers[0]
	if len(fp.Ports) != 2 || p.Ports[fp.Ports[0]].Name != "leaf:spine" || p.Ports[fp.LastPort].Name != "spine:r" {
		t.Errorf("ports %v, last %d: want leaf:spine then spine:r", fp.Ports, fp.LastPort)
	}
	if sp.TrimDSCP != 10 || sp.TrimLastHopDSCP != 9 || sp.LineRate != 500*units.Mbit {
		t.Errorf("server %+v: want trim DSCP 10, last hop 9, the receiver's 500mbit", sp)
	}
	_, err = Parse("t.yaml", []byte(strings.Replace(twoHops, "3:trim,trim-dscp=10", "3:trim", 1)))
	if want := `t.yaml:14: flows[0].to: "r": port spine:r trims into DSCP 9 as another port on the path does`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got  %v\nwant %s…", err, want)
	}
}

// TestFlowOverrides: a variant's flows: entries pick one flow or a group
// and set its cc, lb or loss, checked for the flow's transport.
func TestFlowOverrides(t *testing.T) {
	f, err := Parse("t.yaml", []byte(base+"variants:\n  - {name: a, flows: [{name: f1, cc: none}, {group: f2, cc: both}]}\n  - {name: b, flows: [{name: f2, lb: oblivious}]}\n  - {name: c, flows: [{name: f2, loss: sleek}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	vp := f.Plan().Variants[0].Plan
	if vp.Flows[0].Flow.CC != "none" || vp.Flows[1].Client.UETCC != pds.CCBoth || f.Flows[0].CC != "dcqcn" {
		t.Errorf("variant flows: %s, %v; the file's f1 %s", vp.Flows[0].Flow.CC, vp.Flows[1].Client.UETCC, f.Flows[0].CC)
	}
	if vb := f.Plan().Variants[1].Plan; vb.Flows[1].Client.LB != lb.KindOblivious || vb.Flows[1].Flow.CC != f.Flows[1].CC || f.Flows[1].LB != "" {
		t.Errorf("variant b's f2: lb %v, cc %s; the file's lb %q", vb.Flows[1].Client.LB, vb.Flows[1].Flow.CC, f.Flows[1].LB)
	}
	// A uet flow's knobs are NSCC's, in name order.
	g, err := Parse("t.yaml", []byte(strings.Replace(base, "transport: uet,", "transport: uet, knobs: {target_qdelay: 4ms, gamma: 0.5},", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if k := g.Plan().Flows[1].Client.NSCCKnobs; len(k) != 2 || k[0].String() != "gamma=0.5" || k[1].String() != "target_qdelay=4ms" {
		t.Errorf("f2's NSCC knobs %v, want gamma=0.5 target_qdelay=4ms", k)
	}
	if vc := f.Plan().Variants[2].Plan; vc.Flows[1].Client.Loss != pds.LossSLEEK || f.Plan().Flows[1].Client.Loss != pds.LossRACK {
		t.Errorf("variant c's f2: loss %v; the file's %v", vc.Flows[1].Client.Loss, f.Plan().Flows[1].Client.Loss)
	}
	for _, c := range []struct{ v, want string }{
		{"{name: a, flows: [{name: f1, group: g, cc: none}]}", `variants[0].flows[0]: give name (one flow) or group (its flows), not both or neither`},
		{"{name: a, flows: [{name: f9, cc: none}]}", `variants[0].flows[0].name: "f9": no such flow`},
		{"{name: a, flows: [{group: g9, cc: none}]}", `variants[0].flows[0].group: "g9": no flow is in this group`},
		{"{name: a, flows: [{name: f1, cc: rccc}]}", `variants[0].flows[0].cc: "rccc": flow f1: want dcqcn or none with transport rocev2`},
		{"{name: a, flows: [{name: f2, cc: dcqcn}]}", `variants[0].flows[0].cc: "dcqcn": flow f2: want nscc, rccc, both or none with transport uet`},
		{"{name: a, flows: [{name: f2, cc: both}, {group: f2, cc: rccc}]}", `variants[0].flows[1]: flow f2 is given twice (also variants[0].flows[0])`},
		{"{name: a, flows: [{name: f2}]}", `variants[0].flows[0]: give cc, lb, loss or some of them: what the variant changes`},
		{"{name: a, flows: [{name: f1, loss: none}]}", `variants[0].flows[0].loss: "none": flow f1 is rocev2: loss is uet's`},
		{"{name: a, flows: [{name: f2, loss: quick}]}", `variants[0].flows[0].loss: "quick": want rack, sleek or none`},
		{"{name: a, flows: [{name: f2, cc: rccc, loss: sleek}]}", `variants[0].flows[0]: flow f2: loss sleek with cc rccc: SLEEK's threshold is 1.5 congestion windows (cc nscc or both)`},
		{"{name: a, flows: [{name: f1, lb: oblivious}]}", `variants[0].flows[0].lb: "oblivious": flow f1 is rocev2: lb is uet's`},
		{"{name: a, flows: [{name: f2, lb: spray}]}", `variants[0].flows[0].lb: "spray": want none, `},
	} {
		_, err := Parse("t.yaml", []byte(base+"variants:\n  - "+c.v+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\ngot  %v\nwant …%s", c.v, err, c.want)
		}
	}
}
