package dialect_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/dialect"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// portConfig is qdisc.DefaultConfig at rate with portctl's --tc and
// --dscp options on top, as a lab file's port is built.
func portConfig(tb testing.TB, rate units.Rate, tcs, dscps []string) qdisc.Config {
	tb.Helper()
	cfg := qdisc.DefaultConfig(rate)
	e, err := qdisc.ParseEdits(tcs, dscps, "")
	if err != nil {
		tb.Fatal(err)
	}
	if err := e.Apply(&cfg); err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// The golden ports.
var ports = []struct {
	name string
	cfg  func(testing.TB) qdisc.Config
}{
	// The demo's switch port (host/labfile/examples/demo.yaml, port
	// sw:r): the 500 Mbit/s link's DefaultConfig and its tc line: WRED
	// with PPFC and an alarm.
	{"demo", func(tb testing.TB) qdisc.Config {
		return portConfig(tb, 500*units.Mbit, []string{"3:wred:min=50kb,max=1000kb,p=0.1,limit=2mb,xoff=1mb,xon=768kb,alarm=896kb"}, nil)
	}},
	// A lossless port every dialect says whole but for its buffers: PPFC
	// without alarm on the RoCE class, a step class, the strict CNP class.
	{"lossless", func(tb testing.TB) qdisc.Config {
		return portConfig(tb, 100*units.Gbit, []string{
			"3:wred:min=150kb,max=3mb,p=0.2,limit=4mb,xoff=2mb,xon=1536kb",
			"5:name=bulk:step:k=100kb,limit=2mb",
		}, []string{"24-31=3", "10=5"})
	}},
	// Seed 000's port as portctl attach makes it: WRED, no PPFC.
	{"seed000", func(tb testing.TB) qdisc.Config { return qdisc.DefaultConfig(25 * units.Gbit) }},
}

var goldenExt = map[dialect.Dialect]string{dialect.SONiC: ".json", dialect.EOS: ".eos", dialect.NXOS: ".nxos", dialect.Junos: ".junos"}

// golden compares got with testdata/name, or rewrites it under -update.
func golden(tb testing.TB, name, got string) {
	tb.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			tb.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		tb.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestGoldenDialects(t *testing.T) {
	for _, pt := range ports {
		cfg := pt.cfg(t)
		for _, d := range dialect.Dialects() {
			t.Run(pt.name+"/"+string(d), func(t *testing.T) {
				out, err := dialect.Render(&cfg, d, dialect.Options{Source: "golden port " + pt.name})
				if err != nil {
					t.Fatal(err)
				}
				golden(t, pt.name+goldenExt[d], out.Text)
				for _, n := range out.Notes {
					if !strings.Contains(out.Text, n) {
						t.Errorf("note %q is not in the output's header", n)
					}
				}
			})
		}
	}
}

// TestLosslessIsPPFC: PFC no-drop goes to the PPFC class, not to the
// strict CNP class.
func TestLosslessIsPPFC(t *testing.T) {
	cfg := ports[1].cfg(t)
	for d, want := range map[dialect.Dialect][]string{
		dialect.SONiC: {`"pfc_enable": "3"`},
		dialect.EOS:   {"priority-flow-control priority 3 no-drop"},
		dialect.NXOS:  {"pause pfc-cos 3"},
		dialect.Junos: {"queue-num 3 no-loss;", "code-point 011010 {"},
	} {
		out, err := dialect.Render(&cfg, d, dialect.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(out.Text, w) {
				t.Errorf("%s: lacks %q", d, w)
			}
		}
		for _, bad := range []string{"priority 6 no-drop", "pfc-cos 6", "queue-num 6 no-loss", `"pfc_enable": "3,6"`} {
			if strings.Contains(out.Text, bad) {
				t.Errorf("%s: the strict CNP class is lossless: %q", d, bad)
			}
		}
	}
	// Without PPFC nothing is no-drop.
	seed := qdisc.DefaultConfig(25 * units.Gbit)
	out, err := dialect.Render(&seed, dialect.EOS, dialect.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.Text, "priority-flow-control") {
		t.Errorf("seed 000's port has no PPFC but got no-drop:\n%s", out.Text)
	}
}

func TestRefusals(t *testing.T) {
	base := func(tcs ...string) qdisc.Config { return portConfig(t, 10*units.Gbit, tcs, nil) }
	for _, tc := range []struct {
		name     string
		cfg      qdisc.Config
		dialects []dialect.Dialect
		class    int
		field    string
		want     string
	}{
		{"codel", base("3:codel:target=50us,interval=1ms"), dialect.Dialects(), 3, "ecn", "class 3 (roce): ecn (codel): no vendor equivalent"},
		{"ecnsharp", base("3:ecnsharp:ins=100us,pst=20us,interval=200us"), dialect.Dialects(), 3, "ecn", "ecn (ecnsharp)"},
		{"tcn", base("3:tcn:ins=200us"), dialect.Dialects(), 3, "ecn", "ecn (tcn)"},
		{"trim", base("3:trim"), dialect.Dialects(), 3, "trim_bytes", "trim_bytes (128b): packet trimming has no form"},
		{"remark", base("3:remark=0"), dialect.Dialects(), 3, "remark_dscp", "remark_dscp (0): the lab's DSCP rewrite on egress is a fault to study"},
		{"max_p", base("3:p=0.015"), dialect.Dialects(), 3, "max_p", "max_p (0.015): must be a whole percent"},
		{"wred-drop mixed", base("5:step:k=100kb,wred-drop"), []dialect.Dialect{dialect.EOS}, -1, "wred_drop", "eos: wred_drop (class 5): EOS's qos random-detect ecn allow non-ect is global: it cannot pass Not-ECT packets for class 3"},
		{"strict below shared", base("2:strict", "6:no-strict"), []dialect.Dialect{dialect.EOS}, 2, "strict", "a strict class must be numbered above every non-strict one"},
	} {
		for _, d := range tc.dialects {
			t.Run(tc.name+"/"+string(d), func(t *testing.T) {
				cfg := tc.cfg
				switch tc.name {
				case "strict below shared":
					cfg.DSCPClass[16] = 2
				case "wred-drop mixed":
					cfg.DSCPClass[10] = 5
				}
				_, err := dialect.Render(&cfg, d, dialect.Options{})
				var ue *dialect.UnsupportedError
				if !errors.As(err, &ue) {
					t.Fatalf("err = %v, want an UnsupportedError", err)
				}
				if ue.Class != tc.class || ue.Field != tc.field || ue.Dialect != d {
					t.Errorf("refused %+v, want class %d field %s", ue, tc.class, tc.field)
				}
				if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), string(d)+": ") {
					t.Errorf("error %q lacks %q", err, tc.want)
				}
			})
		}
	}
	// Units: SONiC's pir is bytes/s, EOS shapes in kbps.
	odd := qdisc.DefaultConfig(1_000_001 * units.Bit)
	for d, want := range map[dialect.Dialect]string{
		dialect.SONiC: "sonic: rate (1000001bit): must be whole bytes per second",
		dialect.EOS:   "eos: rate (1000001bit): must be whole kbps",
	} {
		if _, err := dialect.Render(&odd, d, dialect.Options{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", d, err, want)
		}
	}
	// Every refusal is reported, not only the first.
	two := base("3:codel:target=50us,interval=1ms", "5:trim")
	_, err := dialect.Render(&two, dialect.NXOS, dialect.Options{})
	if err == nil || !strings.Contains(err.Error(), "class 3") || !strings.Contains(err.Error(), "class 5") {
		t.Errorf("err = %v, want both classes", err)
	}
	// An invalid configuration is its own validation's error.
	bad := qdisc.DefaultConfig(10 * units.Gbit)
	bad.Classes[3].MaxThBytes = 10 * units.MiB
	if _, err := dialect.Render(&bad, dialect.SONiC, dialect.Options{}); err == nil || !strings.Contains(err.Error(), "max_th (10mb) must not exceed limit") {
		t.Errorf("err = %v, want the validation's", err)
	}
	// Junos: a port buffer smaller than the classes' limits.
	seed := qdisc.DefaultConfig(10 * units.Gbit)
	if _, err := dialect.Render(&seed, dialect.Junos, dialect.Options{PortBufferBytes: units.MiB}); err == nil || !strings.Contains(err.Error(), "port_buffer (1mb): must hold") {
		t.Errorf("err = %v, want the port buffer refused", err)
	}
}

// TestJunosPortBuffer: with the switch's buffer given, buffer-size is the
// limit's share of it.
func TestJunosPortBuffer(t *testing.T) {
	cfg := qdisc.DefaultConfig(10 * units.Gbit)
	out, err := dialect.Render(&cfg, dialect.Junos, dialect.Options{PortBufferBytes: 16 * units.MiB, Interface: "et-0/0/4"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tc3-roce {\n", "buffer-size percent 13;", "et-0/0/4 {", "shaping-rate 10g;"} {
		if !strings.Contains(out.Text, want) {
			t.Errorf("lacks %q:\n%s", want, out.Text)
		}
	}
}

func TestParseDialect(t *testing.T) {
	for _, s := range []string{"sonic", "EOS", " nxos", "Junos"} {
		if _, err := dialect.Parse(s); err != nil {
			t.Errorf("Parse(%q): %v", s, err)
		}
	}
	if _, err := dialect.Parse("ios"); err == nil || err.Error() != `dialect "ios": want sonic, eos, nxos or junos` {
		t.Errorf("Parse(ios) = %v", err)
	}
}
