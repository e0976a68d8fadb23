package conf

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

type flow struct {
	Name  string         `yaml:"name"`
	Rate  units.Rate     `yaml:"rate"`
	Start time.Duration  `yaml:"start"`
	Size  units.ByteSize `yaml:"size"`
	QPs   int            `yaml:"qps"`
	Port  uint16         `yaml:"port"`
	Dst   netip.Addr     `yaml:"dst"`
}

type doc struct {
	Listen string            `yaml:"listen"`
	Flows  []flow            `yaml:"flows"`
	Knobs  map[string]string `yaml:"knobs"`
	Debug  *bool             `yaml:"debug"`
}

func TestDecode(t *testing.T) {
	src := `
listen: 198.18.0.1
debug: true
knobs: {rpg_time_reset: 300}
flows:
  - name: a
    rate: 10gbit
    start: 100us
    size: 1MB
    qps: 4
    port: 4791
    dst: 198.18.0.2
`
	var d doc
	if err := Decode("x.yaml", []byte(src), &d); err != nil {
		t.Fatal(err)
	}
	f := d.Flows[0]
	if f.Rate != 10*units.Gbit || f.Start != 100*time.Microsecond || f.Size != 1<<20 || f.QPs != 4 || f.Port != 4791 ||
		f.Dst != netip.MustParseAddr("198.18.0.2") || !*d.Debug || d.Knobs["rpg_time_reset"] != "300" {
		t.Fatalf("decoded %+v %+v", d, f)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"flows:\n  - name: a\n    rate: 10gigs\n", `x.yaml:3: flows[0].rate: "10gigs": unknown unit "gigs"`},
		{"flows:\n  - name: a\n    qps: many\n", `x.yaml:3: flows[0].qps: "many": want an integer in`},
		{"flows:\n  - port: 70000\n", `x.yaml:2: flows[0].port: "70000": want an integer in 0..65535`},
		{"flows:\n  - nmae: a\n", `x.yaml:2: flows[0].nmae: unknown field; flows[0] has dst, name, port, qps, rate, size, start`},
		{"listen: a\nlisten: b\n", `listen`},
		{"flows: 3\n", `x.yaml:1: flows: "3": want a list`},
		{"debug: maybe\n", `x.yaml:1: debug: "maybe": want true or false`},
		{"flows:\n - start: soon\n", `flows[0].start: "soon": want a duration like 100us, 5ms, 1.5s`},
		{"", `x.yaml: the file is empty`},
	} {
		var d doc
		err := Decode("x.yaml", []byte(c.src), &d)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.src, err, c.want)
		}
	}
}

func TestLocate(t *testing.T) {
	src := []byte("listen: x\nflows:\n  - name: a\n  - name: b\n    qps: 0\n")
	err := Locate("x.yaml", src, Errorf("flows[1].qps", 0, "1..64"))
	var ce *Error
	if !errors.As(err, &ce) || ce.Line != 5 || err.Error() != `x.yaml:5: flows[1].qps: "0": 1..64` {
		t.Fatalf("got %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte("flows:\n  - name: a\n    rate: 1gbit\n"))
	f.Add([]byte("knobs: {a: b}\ndebug: [1]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var d doc
		_ = Decode("f", b, &d)
	})
}
