package main

import (
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestApplyPPFC(t *testing.T) {
	base := qdisc.DefaultConfig(units.Gbit).Classes[qdisc.ClassRoCE] // 2 MiB buffer
	for _, c := range []struct {
		spec             string
		xoff, xon, alarm units.ByteSize
		err              string
	}{
		{spec: "auto", xoff: units.MiB, xon: 768 * units.KiB, alarm: 896 * units.KiB},
		{spec: "off"},
		{spec: "xoff=1mb,xon=512kb", xoff: units.MiB, xon: 512 * units.KiB},
		{spec: "xoff=1mb,xon=512kb,alarm=600kb", xoff: units.MiB, xon: 512 * units.KiB, alarm: 600 * units.KiB},
		{spec: "xoff=1mb,xon=512kb,alarm=400kb", err: "alarm (400kb) must be above xon (512kb) and below xoff (1mb)"},
		{spec: "xoff=1mb,alarm=600kb", err: "want both xoff=SIZE and xon=SIZE"},
		{spec: "xoff=1mb,xon=512kb,alarm=1mb,alarm=2mb", err: "alarm given twice"},
		{spec: "xoff=1mb,xon=512kb,hold=1mb", err: `"hold=1mb": want xoff=SIZE,xon=SIZE[,alarm=SIZE], auto or off`},
	} {
		cc := base
		err := applyPPFC(&cc, c.spec)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("-ppfc %s: error %v, want %q", c.spec, err, c.err)
			}
		case err != nil:
			t.Errorf("-ppfc %s: %v", c.spec, err)
		case cc.XoffBytes != c.xoff || cc.XonBytes != c.xon || cc.AlarmBytes != c.alarm:
			t.Errorf("-ppfc %s: xoff %s xon %s alarm %s; want %s, %s, %s", c.spec, cc.XoffBytes, cc.XonBytes, cc.AlarmBytes, c.xoff, c.xon, c.alarm)
		}
	}
}
