package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestParseFlagsDefaults(t *testing.T) {
	var out, errs bytes.Buffer
	o, code := parseFlags(nil, &out, &errs)
	if o == nil || code != exitOK {
		t.Fatalf("defaults refused: %d %s", code, errs.String())
	}
	if o.senders() != 3 || o.rate != 200*units.Mbit || !slices.Equal(o.schemeList(), tcpSchemes) || o.cc != ccDCTCP || o.runs != 5 {
		t.Errorf("defaults: %d senders at %s, schemes %v, cc %s, %d runs", o.senders(), o.rate, o.schemeList(), o.cc, o.runs)
	}
	if o.pstLambdaFor() != dctcpLambda {
		t.Errorf("DCTCP's persistent λ %g, want %g", o.pstLambdaFor(), dctcpLambda)
	}
	roce, _ := parseFlags([]string{"-transport", "roce"}, &out, &errs)
	if roce == nil || !slices.Equal(roce.schemeList(), roceSchemes) || roce.congestion() != "dcqcn" {
		t.Errorf("-transport roce: %+v", roce)
	}
	// Base RTTs spread about 3x: with the ~0.1 ms of the veth path the
	// delays make RTTs of d, 2d, 3d.
	base := 100 * time.Microsecond
	if o.delays[1]+base != 2*(o.delays[0]+base) || o.delays[2]+base != 3*(o.delays[0]+base) {
		t.Errorf("default delays %v do not make RTTs of d, 2d, 3d", o.delays)
	}
	// Under 10 minutes: 5 runs of 5 schemes of warm-up + measure +
	// incast + drain.
	if total := time.Duration(o.runs*len(o.schemeList())) * (o.perScheme() + o.cooldown); total > 10*time.Minute {
		t.Errorf("a default run takes up to %s of traffic, want under 10 minutes", total)
	}
}

func TestParseFlags(t *testing.T) {
	var out, errs bytes.Buffer
	o, code := parseFlags([]string{"-rate", "100mbit", "-delays", "1ms,2ms", "-measure", "5s", "-warmup", "500ms",
		"-schemes", "ecnsharp,step-tail", "-limit", "256kb", "-short-max", "30kb", "-short-flows", "10", "-seed", "9", "-out", "/tmp/x"}, &out, &errs)
	if o == nil {
		t.Fatalf("refused (%d): %s", code, errs.String())
	}
	if o.rate != 100*units.Mbit || o.senders() != 2 || o.delays[1] != 2*time.Millisecond || o.measure != 5*time.Second ||
		o.warmup != 500*time.Millisecond || o.limit != 256*units.KiB || o.shortMaxBytes != 30*units.KiB || o.shortFlows != 10 || o.seed != 9 || o.outDir != "/tmp/x" {
		t.Errorf("parsed %+v", o)
	}
	// Schemes run in the canonical order whatever the order given.
	if !slices.Equal(o.schemes, []string{"step-tail", "ecnsharp"}) {
		t.Errorf("schemes %v", o.schemes)
	}
}

func TestParseFlagsRejects(t *testing.T) {
	for _, args := range [][]string{
		{"-rate", "100kbit"},
		{"-delays", "1ms,-1ms"},
		{"-delays", "1s"},
		{"-delays", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"},
		{"-long", "9"},
		{"-measure", "100ms"},
		{"-sample", "10us"},
		{"-schemes", "red"},
		{"-schemes", "tcn,tcn"},
		{"-short-min", "64kb"},
		{"-pings", "1"},
		{"-lambda", "0"},
		{"-limit", "1kb"},
		{"-out", ""},
		{"extra"},
	} {
		var out, errs bytes.Buffer
		o, code := parseFlags(args, &out, &errs)
		if o != nil || code != exitUsage {
			t.Errorf("%v: accepted (code %d)", args, code)
		}
		if errs.Len() == 0 {
			t.Errorf("%v: no message", args)
		}
	}
}

func TestHelp(t *testing.T) {
	var out, errs bytes.Buffer
	o, code := parseFlags([]string{"-help"}, &out, &errs)
	if o != nil || code != exitOK {
		t.Fatalf("-help: %v %d", o, code)
	}
	for _, want := range []string{"make experiment", "-delays", "-schemes", "ECN#"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// TestParseFlagsTimescale: the flags stay the fabric's, the wall-time
// bounds hold on the slowed fabric, and a bad factor is refused by name.
func TestParseFlagsTimescale(t *testing.T) {
	var out, errs bytes.Buffer
	o, code := parseFlags([]string{"-timescale", "50", "-rate", "10gbit", "-delays", "30us,60us", "-measure", "100ms", "-warmup", "40ms", "-sample", "20us"}, &out, &errs)
	if o == nil {
		t.Fatalf("refused (%d): %s", code, errs.String())
	}
	if o.wireRate() != 200*units.Mbit || o.wire(o.measure) != 5*time.Second || !slices.Equal(o.wireDelays(), []time.Duration{1500 * time.Microsecond, 3 * time.Millisecond}) {
		t.Errorf("wire: %s, measure %s, delays %v", o.wireRate(), o.wire(o.measure), o.wireDelays())
	}
	if got := o.perScheme(); got != 50*(140*time.Millisecond+5*(200*time.Millisecond+shortTimeout)) {
		t.Errorf("perScheme %s: want the fabric's times 50 times", got)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-timescale", "0.5"}, "-timescale: timescale 0.5: must be 1..1000"},
		{[]string{"-timescale", "fast"}, "want a factor"},
		{[]string{"-timescale", "10", "-measure", "50ms"}, "-measure (50ms, 500ms at -timescale 10) must take 1s to 10m0s"},
		{[]string{"-timescale", "100", "-rate", "50mbit"}, "1mbit to 10gbit on the wire"},
	} {
		errs.Reset()
		if o, _ := parseFlags(tc.args, &out, &errs); o != nil || !strings.Contains(errs.String(), tc.want) {
			t.Errorf("%v: got %q, want %q", tc.args, errs.String(), tc.want)
		}
	}
	errs.Reset()
	out.Reset()
	parseFlags([]string{"-help"}, &out, &errs)
	if !strings.Contains(out.String(), "-timescale k slows the whole fabric") {
		t.Error("-help does not document -timescale")
	}
}
