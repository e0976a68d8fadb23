//go:build linux

package labfile

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/host/lab"
)

func load(t *testing.T, path string) *Plan {
	t.Helper()
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return f.Plan()
}

// routeOf finds node's route to dst, written "via a, b".
func routeOf(p *Plan, node, dst string) string {
	for _, r := range p.Spec.Routes {
		if r.Node == node && r.Dst.String() == dst {
			via := []string{r.Via.String()}
			for _, v := range r.Vias {
				via = append(via, v.String())
			}
			return "via " + strings.Join(via, ", ")
		}
	}
	return "none"
}

func TestAddressing(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "198.18.0.0/24"}, {1, "198.18.1.0/24"}, {255, "198.18.255.0/24"}, {256, "198.19.0.0/24"}, {511, "198.19.255.0/24"}} {
		if got := nth24(c.n).String(); got != c.want {
			t.Errorf("nth24(%d) = %s, want %s", c.n, got, c.want)
		}
	}
	lo, hi := halves(netip.MustParsePrefix("198.18.3.0/24"))
	if lo.String() != "198.18.3.0/25" || hi.String() != "198.18.3.128/25" {
		t.Errorf("halves: %s %s", lo, hi)
	}
	// A pinned subnet keeps its /24 from the automatic ones, which move
	// on to the next free one.
	src := `nodes: [{name: a, kind: host}, {name: s, kind: switch}, {name: b, kind: host}, {name: c, kind: host}]
links:
  - {a: a, b: s}
  - {a: s, b: b, subnet: 198.18.1.0/24}
  - {a: s, b: "c:up", delay: 1ms}
`
	f, err := Parse("x.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p := f.Plan()
	var got []string
	for _, l := range p.Spec.Links {
		got = append(got, fmt.Sprintf("%s:%s %s - %s:%s %s", l.A.Node, l.A.Dev, l.A.Addr, l.B.Node, l.B.Dev, l.B.Addr))
	}
	want := []string{
		"a:s 198.18.0.1/24 - s:a 198.18.0.2/24",
		"s:b 198.18.1.1/24 - b:s 198.18.1.2/24",
		// links[2] skips the pinned 198.18.1.0/24 and runs through a relay.
		"s:c 198.18.2.1/25 - _l2:s 198.18.2.2/25",
		"_l2:c 198.18.2.129/25 - c:up 198.18.2.130/25",
	}
	if !slices.Equal(got, want) {
		t.Errorf("links:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r := p.Relays[0]; r.Node != "_l2" || r.DevA != "s" || r.DevB != "c" || r.Delay.String() != "1ms" {
		t.Errorf("relay %+v", r)
	}
	if p.Addrs["c"].String() != "198.18.2.130" || p.Addrs["s"].String() != "198.18.0.2" {
		t.Errorf("addresses %v", p.Addrs)
	}
	for _, l := range p.Spec.Links {
		for _, ep := range []lab.Endpoint{l.A, l.B} {
			if !lab.AddrRange4.Contains(ep.Addr.Addr()) {
				t.Errorf("%s outside %s", ep.Addr, lab.AddrRange4)
			}
		}
	}
	// Hosts route everything via their switch; the relay knows the far
	// side; nothing routes through a host.
	for _, c := range [][3]string{
		{"a", "198.18.2.128/25", "via 198.18.0.2"},
		{"c", "198.18.0.0/24", "via 198.18.2.129"},
		{"_l2", "198.18.0.0/24", "via 198.18.2.1"},
		{"s", "198.18.2.128/25", "via 198.18.2.2"},
		{"a", "198.18.0.0/24", "none"},
	} {
		if got := routeOf(p, c[0], c[1]); got != c[2] {
			t.Errorf("%s's route to %s: %s, want %s", c[0], c[1], got, c[2])
		}
	}
}

// TestRoutesNeverCrossHosts: a host between two switches does not
// forward, so the switches reach each other's subnets only if a switch
// path exists.
func TestRoutesNeverCrossHosts(t *testing.T) {
	src := `nodes: [{name: s1, kind: switch}, {name: h, kind: host}, {name: s2, kind: switch}, {name: x, kind: host}]
links:
  - {a: s1, b: h}
  - {a: h, b: s2}
  - {a: s2, b: x}
`
	f, err := Parse("x.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p := f.Plan()
	if got := routeOf(p, "s1", "198.18.2.0/24"); got != "none" {
		t.Errorf("s1 routes to s2's subnet %s: through host h", got)
	}
	if got := routeOf(p, "h", "198.18.2.0/24"); got != "via 198.18.1.2" {
		t.Errorf("h's route to x's subnet: %s", got)
	}
}

// TestECMP: the multipath example's leaves spread over both spines.
func TestECMP(t *testing.T) {
	p := load(t, "examples/multipath.yaml")
	for _, c := range [][3]string{
		{"leaf1", "198.18.5.0/24", "via 198.18.1.2, 198.18.2.2"}, // r1's subnet over sp1 and sp2
		{"leaf2", "198.18.0.0/24", "via 198.18.3.1, 198.18.4.1"}, // h1's, back over both
		{"sp1", "198.18.5.0/24", "via 198.18.3.2"},
		{"h1", "198.18.5.0/24", "via 198.18.0.2"},
	} {
		if got := routeOf(p, c[0], c[1]); got != c[2] {
			t.Errorf("%s's route to %s: %s, want %s", c[0], c[1], got, c[2])
		}
	}
	// The 5-tuple, policy 1: one ECMP choice on a path (a fat tree's
	// nodes: TestECMPHashSeeds).
	for _, n := range p.Spec.Nodes {
		if n.Sysctls["net.ipv4.fib_multipath_hash_policy"] != "1" || n.Sysctls[fibHashSeed] != "" {
			t.Errorf("%s hashes ECMP on %v, want the 5-tuple (policy 1, no seed)", n.Name, n.Sysctls)
		}
	}
	if fp := p.Flows[0]; fp.Bottleneck != 100e6 || fp.Client.LineRate != 200e6 {
		t.Errorf("flow's bottleneck %s, line rate %s", fp.Bottleneck, fp.Client.LineRate)
	}
	var watched []string
	for _, po := range p.Ports {
		if po.Watch {
			watched = append(watched, po.Name)
		}
	}
	if !slices.Equal(watched, []string{"sp1:leaf2", "sp2:leaf2"}) {
		t.Errorf("watched %v", watched)
	}
}

// TestWANTunnels: the WAN example's PEs tunnel the other DC's subnets to
// each other's WAN address; the core and the relay know only the WAN.
func TestWANTunnels(t *testing.T) {
	p := load(t, "examples/wan.yaml")
	if len(p.PEs) != 2 {
		t.Fatalf("PEs %+v", p.PEs)
	}
	pe1, pe2 := p.PEs[0], p.PEs[1]
	var r1, r2 []string
	for _, r := range pe1.Config.Routes {
		r1 = append(r1, r.Prefix.String()+">"+r.Remote.String())
	}
	for _, r := range pe2.Config.Routes {
		r2 = append(r2, r.Prefix.String()+">"+r.Remote.String())
	}
	if pe1.Node != "pe1" || pe1.Dev != "core" || pe1.Config.Local.String() != "198.18.3.1" ||
		!slices.Equal(r1, []string{"198.18.5.0/24>198.18.4.2", "198.18.6.0/24>198.18.4.2"}) {
		t.Errorf("pe1: %s:%s local %s routes %v", pe1.Node, pe1.Dev, pe1.Config.Local, r1)
	}
	if pe2.Node != "pe2" || pe2.Dev != "core" || pe2.Config.Local.String() != "198.18.4.2" ||
		!slices.Equal(r2, []string{"198.18.0.0/24>198.18.3.1", "198.18.1.0/24>198.18.3.1", "198.18.2.0/24>198.18.3.1"}) {
		t.Errorf("pe2: %s:%s local %s routes %v", pe2.Node, pe2.Dev, pe2.Config.Local, r2)
	}
	for _, n := range []string{"core", "_l3"} {
		for _, r := range p.Spec.Routes {
			if r.Node == n && (r.Dst.String() == "198.18.0.0/24" || r.Dst.String() == "198.18.6.0/24") {
				t.Errorf("%s has a route to data-centre subnet %s", n, r.Dst)
			}
		}
	}
	if got := routeOf(p, "pe1", "198.18.6.0/24"); got != "via 198.18.3.2" {
		t.Errorf("pe1's route to r1's subnet: %s (want via the relay into the WAN)", got)
	}
	fp := p.Flows[0]
	if !fp.Crosses || fp.PathMTU != 9000-20 || fp.Client.MTU != 4096 {
		t.Errorf("flow crosses %v, path MTU %d, MTU %d", fp.Crosses, fp.PathMTU, fp.Client.MTU)
	}
	if po := p.Ports[0]; po.Name != "core:pe2" || po.PeerNode != "pe2" || po.PeerDev != "core" {
		t.Errorf("port %+v", po)
	}
}

func TestDeviceNames(t *testing.T) {
	src := `nodes: [{name: a, kind: host}, {name: s, kind: switch}, {name: averyveryverylongname, kind: host}]
links:
  - {a: a, b: s}
  - {a: a, b: s}
  - {a: s, b: averyveryverylongname}
  - {a: "s:a", b: "a:eth9"}
`
	f, err := Parse("x.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range f.Plan().Links {
		got = append(got, l.A.Node+":"+l.A.Dev+"-"+l.B.Node+":"+l.B.Dev)
	}
	// Named devices first (s:a is taken), then after the peer, then eth<n>.
	want := []string{"a:s-s:a-2", "a:s-2-s:a-3", "s:eth0-averyveryverylongname:s", "s:a-a:eth9"}
	if !slices.Equal(got, want) {
		t.Errorf("devices %v, want %v", got, want)
	}
}

// TestRelayHolds: a relay's held packets reach the port around the
// flow's loop: its data at once (or past the links between), its replies
// after the rest of their way back and the data's way out again.
func TestRelayHolds(t *testing.T) {
	// s ─1ms─ sw ─[port]─ m ─2ms─ r: one-way 3 ms, the loop 6 ms; the
	// port at sw sees the data 1 ms out.
	src := `nodes: [{name: s, kind: host}, {name: sw, kind: switch}, {name: m, kind: switch}, {name: r, kind: host}]
links:
  - {a: s, b: sw, delay: 1ms}
  - {a: sw, b: m, rate: 100mbit}
  - {a: m, b: r, delay: 2ms}
ports: [{port: sw:m, tc: ["0:step:k=30kb"]}]
flows: [{name: f, from: s, to: r, transport: tcp, size: 1mb}]
timescale: 2
`
	f, err := Parse("x.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p := f.Plan()
	got := map[string]string{}
	for _, h := range p.Flows[0].RelayHolds {
		got[p.Relays[h.Relay].Node+":"+h.Dev] = h.Via.String()
	}
	// In the file's time (the plan's is twice it: timescale 2):
	want := map[string]string{
		"_l0:sw": "0s",  // data, released into the port
		"_l0:s":  "2ms", // a reply: at s at once, its data 1 ms out
		"_l2:r":  "8ms", // data past the port, released at 3 ms: r, 3 ms back to s, 1 ms out
		"_l2:m":  "4ms", // a reply released at 5 ms: 1 ms to s, 1 ms out
	}
	if !maps.Equal(got, want) {
		t.Errorf("relay holds %v, want %v", got, want)
	}
}
