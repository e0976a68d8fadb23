package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestParseTrim(t *testing.T) {
	type want struct {
		bytes units.ByteSize
		dscp  qdisc.DSCP
		class qdisc.ClassID
	}
	for _, tc := range []struct {
		name string
		tc   []string
		want want
		err  string // substring of the error; "" = success
	}{
		{name: "the word: defaults", tc: []string{"3:trim"}, want: want{128, 9, 7}},
		{name: "every key", tc: []string{"3:trim=256,trim-dscp=10,trim-class=5"}, want: want{256, 10, 5}},
		{name: "underscores and tcN", tc: []string{"3:trim_bytes=64b,trim_dscp=11,trim_class=tc6"}, want: want{64, 11, 6}},
		{name: "later spec keeps the rest", tc: []string{"3:trim", "3:trim-dscp=12"}, want: want{128, 12, 7}},
		{name: "no-trim", tc: []string{"3:trim", "3:no-trim"}, want: want{}},
		{name: "trim=0 is off", tc: []string{"3:trim", "3:trim=0"}, want: want{}},
		{name: "trim-dscp without trim", tc: []string{"3:trim-dscp=9"},
			err: "--tc 3:trim-dscp=9: trim-dscp and trim-class need trim: class 3 does not trim (e.g. 3:trim=128,trim-dscp=9,trim-class=7)"},
		{name: "no-trim with keys", tc: []string{"3:no-trim,trim-dscp=9"}, err: "no-trim turns trimming off: give it without trim, trim-dscp and trim-class"},
		{name: "dscp not a number", tc: []string{"3:trim,trim-dscp=ef"}, err: `--tc 3:trim,trim-dscp=ef: trim-dscp "ef": want a DSCP, 1-63`},
		{name: "dscp out of range", tc: []string{"3:trim,trim-dscp=64"}, err: `trim-dscp "64": want a DSCP, 1-63`},
		{name: "class out of range", tc: []string{"3:trim,trim-class=8"}, err: "--tc 3:trim,trim-class=8: trim-class: class 8 out of range 0-7"},
		{name: "twice", tc: []string{"3:trim,trim=64"}, err: "trim given twice"},
		// Config.Validate messages come through.
		{name: "too small", tc: []string{"3:trim=20"}, err: "class 3: trim: trim_bytes (20b) must be 28b to 1500b, or 0 (off)"},
		{name: "into itself", tc: []string{"3:trim,trim-class=3"}, err: "class 3: trim: trim_class (3) must be another class (0 to 7, not 3)"},
		{name: "dscp of the class", tc: []string{"3:trim,trim-dscp=26"}, err: "class 3: trim: trim_dscp (26) is a DSCP of class 3 itself"},
		{name: "dscp 0", tc: []string{"3:trim,trim-dscp=0"}, err: "class 3: trim: trim_dscp (0) must be 1 to 63"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := qdisc.DefaultConfig(units.Gbit)
			e, err := qdisc.ParseEdits(tc.tc, nil, "")
			if err == nil {
				err = e.Apply(&cfg)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v\nwant it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cc := cfg.Classes[3]
			if got := (want{cc.TrimBytes, cc.TrimDSCP, cc.TrimClass}); got != tc.want {
				t.Errorf("trim %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRenderShowTrim(t *testing.T) {
	cfg := qdisc.DefaultConfig(units.Gbit)
	e, err := qdisc.ParseEdits([]string{"3:trim,limit=64kb:off"}, []string{"9=7"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Apply(&cfg); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	renderShow(&b, qdisc.Info{Dev: "swp0", Mode: qdisc.QueueVeth, Attach: qdisc.AttachTCX, HTB: true}, &cfg)
	for _, want := range []string{
		"  dscp 9 -> tc7\n",
		"class tc3 (roce)     limit 64kb   ecn off  trim 128b dscp 9 -> tc7\n",
		"class tc6 (cnp)      limit 256kb  ecn off  strict\n",
		"class tc7            limit 1mb    ecn off  strict (trim class)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("show lacks %q:\n%s", want, b.String())
		}
	}
}

func TestRenderStatsTrim(t *testing.T) {
	st := fakeStats(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), 1)
	c, tc := &st.Classes[3], &st.Classes[7]
	c.TrimmedPackets, c.TrimmedBytes, c.TrimmedKeptBytes = 300, 390_000, 42_600
	c.TrimDroppedPackets, c.TrimDroppedBytes = 4, 5768
	tc.EnqueuedPackets, tc.EnqueuedBytes, tc.DequeuedPackets, tc.DequeuedBytes = 300, 42_600, 300, 42_600
	tc.TrimInPackets, tc.TrimInBytes = 300, 42_600
	var b bytes.Buffer
	renderStats(&b, qdisc.Info{Dev: "swp0", Mode: qdisc.QueueVeth}, &st, nil, false)
	for _, want := range []string{
		" Sent 990000 bytes 990 pkt (dropped 12: limit 6, wred 2, aqm 0, trim class full 4)",
		" trimmed 300 pkt to the trim class: cut 390000 bytes, kept 42600 bytes\n",
		"class tc7\n Sent 42600 bytes 300 pkt (dropped 0: limit 0, wred 0, aqm 0)",
		" trimmed in 42600 bytes 300 pkt (from classes that trim; counted in arrived)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("stats lack %q:\n%s", want, b.String())
		}
	}
	// Without trimming nothing about it shows.
	b.Reset()
	plain := fakeStats(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), 1)
	renderStats(&b, qdisc.Info{Dev: "swp0", Mode: qdisc.QueueVeth}, &plain, nil, false)
	if strings.Contains(b.String(), "trim") {
		t.Errorf("stats without trimming mention it:\n%s", b.String())
	}
}

// TestRootTrim: trimming turned on live makes the trim class strict in
// HTB (prio 0), and off again gives it its normal prio back.
func TestRootTrim(t *testing.T) {
	l := newLab(t)
	l.ok(t, "attach", "--rate", "100mbit", "--tc", "3:off,limit=64kb")
	prio := func() string {
		for _, line := range strings.Split(sh(t, "tc", "-n", l.sw, "class", "show", "dev", "swp0"), "\n") {
			if strings.HasPrefix(line, "class htb 1:17 ") {
				f := strings.Fields(line)
				for i := range f {
					if f[i] == "prio" && i+1 < len(f) {
						return f[i+1]
					}
				}
			}
		}
		t.Fatal("no htb class 1:17 with a prio")
		return ""
	}
	if p := prio(); p != "1" {
		t.Errorf("tc7 before trimming: prio %s, want 1", p)
	}
	out := l.ok(t, "configure", "--tc", "3:trim=256,trim-dscp=10", "--dscp", "10=7")
	mustContain(t, "configure", out, "trim 256b dscp 10 -> tc7", "strict (trim class)", "dscp 10 -> tc7")
	if p := prio(); p != "0" {
		t.Errorf("tc7 as trim class: prio %s, want 0", p)
	}
	mustContain(t, "show", l.ok(t, "show"), "trim 256b dscp 10 -> tc7")
	l.ok(t, "configure", "--tc", "3:no-trim")
	if p := prio(); p != "1" {
		t.Errorf("tc7 after no-trim: prio %s, want 1", p)
	}
	l.ok(t, "detach")
	l.checkDetached(t)
}
