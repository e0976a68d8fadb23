//go:build linux

package labfile

import (
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

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
