package nscc

import (
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestSetKnobs(t *testing.T) {
	p := LabParams(units.Gbit, 100*time.Microsecond, 4096)
	for _, kv := range [][2]string{{"target_qdelay", "200us"}, {"gamma", "0.5"}, {"max_wnd", "2"},
		{"initial_cwnd", "8kb"}, {"qa_gate", "4"}, {"disable_quick_adapt", "true"}} {
		if err := p.Set(kv[0], kv[1]); err != nil {
			t.Fatalf("Set(%s, %s): %v", kv[0], kv[1], err)
		}
	}
	if p.TargetQDelay != 200*time.Microsecond || p.Gamma != 0.5 || p.MaxWndBDPs != 2 || p.InitialCwndBytes != 8192 ||
		p.QAGate != 4 || !p.DisableQuickAdapt {
		t.Fatalf("got %+v", p)
	}
	for _, c := range []struct{ name, value, want string }{
		{"gama", "1", `nscc: unknown knob "gama" (valid: target_qdelay,`},
		{"gamma", "2", "nscc: gamma=2: must be in (0, 1]"},
		{"gamma", "x", "nscc: gamma=x: want a number"},
		{"target_qdelay", "soon", "nscc: target_qdelay=soon: "},
		{"qa_gate", "40", "nscc: qa_gate=40: must be 0..31"},
	} {
		q := p
		err := q.Set(c.name, c.value)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Set(%s, %s) = %v, want %q", c.name, c.value, err, c.want)
		}
		if q != p {
			t.Errorf("Set(%s, %s) changed p on error", c.name, c.value)
		}
	}
}
