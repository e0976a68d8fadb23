package qdisc_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestParseAndApply runs --tc/--dscp/--default-class values through
// parsing, applying to the default config and validation.
func TestParseAndApply(t *testing.T) {
	type opts struct {
		tc, dscp []string
		def      string
	}
	for _, tc := range []struct {
		name  string
		in    opts
		check func(t *testing.T, c *qdisc.Config)
		err   string // substring of the error; "" = success
	}{
		{
			name: "ecnsharp from the tune output",
			in:   opts{tc: []string{"3:ecnsharp:ins=200us,pst=85us,interval=200us"}},
			check: func(t *testing.T, c *qdisc.Config) {
				cc := c.Classes[3]
				if cc.ECN != qdisc.ECNSharp || cc.InsTarget != 200*time.Microsecond || cc.PstTarget != 85*time.Microsecond || cc.PstInterval != 200*time.Microsecond {
					t.Errorf("class 3 = %+v", cc)
				}
			},
		},
		{
			name: "ecnsharp probabilistic, sqrt law",
			in:   opts{tc: []string{"3:ecnsharp:ins=100us,ins-max=400us,p=0.2,pst=50us,interval=200us,sqrt"}},
			check: func(t *testing.T, c *qdisc.Config) {
				cc := c.Classes[3]
				if cc.InsMax != 400*time.Microsecond || cc.MaxP != 0.2 || !cc.SqrtLaw {
					t.Errorf("class 3 = %+v", cc)
				}
			},
		},
		{
			name: "ecnsharp on queue length takes sizes",
			in:   opts{tc: []string{"3:ecnsharp:signal=qlen,ins=250kb,pst=100kb,interval=200us"}},
			check: func(t *testing.T, c *qdisc.Config) {
				cc := c.Classes[3]
				if !cc.QueueSignal || cc.InsTargetBytes != 250*units.KiB || cc.PstTargetBytes != 100*units.KiB || cc.InsTarget != 0 {
					t.Errorf("class 3 = %+v", cc)
				}
			},
		},
		{
			name: "flow queues, and off again",
			in:   opts{tc: []string{"3:flows=64", "0:flow-queues=0"}},
			check: func(t *testing.T, c *qdisc.Config) {
				if c.Classes[3].FlowQueues != 64 || c.Classes[0].FlowQueues != 0 {
					t.Errorf("flow queues %d and %d, want 64 and 0", c.Classes[3].FlowQueues, c.Classes[0].FlowQueues)
				}
			},
		},
		{name: "flow queues not a number", in: opts{tc: []string{"3:flows=many"}}, err: `flows: "many" is not a whole number of queues (0 to 256)`},
		{name: "flow queues out of range", in: opts{tc: []string{"3:flows=300"}}, err: "class 3: flow_queues (300) must be 0 (one FIFO) to 256"},
		{name: "flow queues on the strict class", in: opts{tc: []string{"6:flows=2"}}, err: "class 6: flow_queues (2) must be 0 on a strict or trim class"},
		{
			name: "tcn and codel",
			in:   opts{tc: []string{"3:tcn:ins=200us", "0:codel:target=85us,interval=200us,drop-not-ect"}},
			check: func(t *testing.T, c *qdisc.Config) {
				if cc := c.Classes[3]; cc.ECN != qdisc.ECNTCN || cc.InsTarget != 200*time.Microsecond {
					t.Errorf("class 3 = %+v", cc)
				}
				if cc := c.Classes[0]; cc.ECN != qdisc.ECNCoDel || cc.Target != 85*time.Microsecond || cc.Interval != 200*time.Microsecond || !cc.WREDDrop {
					t.Errorf("class 0 = %+v", cc)
				}
			},
		},
		{
			name: "ecnsharp missing settings",
			in:   opts{tc: []string{"3:ecnsharp:ins=200us"}},
			err:  "switching class 3 to ecnsharp needs pst=DUR, interval=DUR",
		},
		{
			name: "pst outside ecnsharp",
			in:   opts{tc: []string{"3:pst=85us"}},
			err:  "pst is a setting of ecnsharp but class 3 is in wred mode",
		},
		{
			name: "target on ecnsharp",
			in:   opts{tc: []string{"3:ecnsharp:ins=200us,pst=85us,interval=200us,target=1ms"}},
			err:  "ecnsharp's persistent target is pst=, not target=",
		},
		{
			name: "duration where qlen wants a size",
			in:   opts{tc: []string{"3:ecnsharp:signal=qlen,ins=200us,pst=85kb,interval=200us"}},
			err:  "ins: with signal=qlen thresholds are sizes",
		},
		{
			name: "pst above ins names the fields",
			in:   opts{tc: []string{"3:ecnsharp:ins=100us,pst=150us,interval=200us"}},
			err:  "pst_target (150us) must be below ins_target (100us) (force_targets to allow)",
		},
		{
			name: "two-threshold (seed 001)",
			in:   opts{tc: []string{"3:2t:t1=50kb,t2=200kb,p1=1,t2-max=400kb,p2=20%,notify=1ms", "5:ecn=two-threshold,t1=10kb,t2=20kb,light-p=0.5,t2_max=40kb,heavy_p=1"}},
			check: func(t *testing.T, c *qdisc.Config) {
				want := qdisc.TwoThreshold{T1Bytes: 50 * units.KiB, T2Bytes: 200 * units.KiB, T2MaxBytes: 400 * units.KiB, LightMaxP: 1, HeavyMaxP: 0.2, NotifyInterval: time.Millisecond}
				if cc := c.Classes[3]; cc.ECN != qdisc.ECNTwoThreshold || cc.TwoThreshold != want {
					t.Errorf("class 3 = %+v", cc)
				}
				if cc := c.Classes[5]; cc.ECN != qdisc.ECNTwoThreshold || cc.TwoThreshold.T2MaxBytes != 40*units.KiB || cc.TwoThreshold.LightMaxP != 0.5 {
					t.Errorf("class 5 = %+v", cc)
				}
			},
		},
		{name: "two-threshold needs its thresholds", in: opts{tc: []string{"3:2t:t1=50kb,t2=200kb"}},
			err: "--tc 3:2t:t1=50kb,t2=200kb: switching class 3 to two-threshold needs p1=PROB, t2-max=SIZE, p2=PROB"},
		{name: "two-threshold t1 at t2", in: opts{tc: []string{"3:2t:t1=200kb,t2=200kb,p1=1,t2-max=400kb,p2=0.2"}},
			err: "class 3: two-threshold: t2 (200kb) must be greater than t1 (200kb)"},
		{name: "two-threshold t2-max above limit", in: opts{tc: []string{"3:2t:t1=50kb,t2=200kb,p1=1,t2-max=4mb,p2=0.2"}},
			err: "class 3: two-threshold: t2_max (4mb) must be greater than t2 (200kb) and at most limit (2mb)"},
		{name: "t1 outside two-threshold", in: opts{tc: []string{"3:t1=50kb"}},
			err: "--tc 3:t1=50kb: t1 is a setting of two-threshold but class 3 is in wred mode (e.g. 3:2t:t1=50kb,t2=200kb,p1=1,t2-max=400kb,p2=0.2)"},
		{name: "two-threshold bad probability", in: opts{tc: []string{"3:2t:p2=1.5"}}, err: `--tc 3:2t:p2=1.5: p2: invalid probability "1.5"`},
		{
			name: "wred on roce",
			in:   opts{tc: []string{"3:wred:min=100kb,max=1.5mb,p=0.2,limit=4mb"}},
			check: func(t *testing.T, c *qdisc.Config) {
				want := qdisc.ClassConfig{Name: "roce", LimitBytes: 4 * units.MiB, ECN: qdisc.ECNWRED,
					MinThBytes: 100 * units.KiB, MaxThBytes: 1536 * units.KiB, MaxP: 0.2}
				if c.Classes[3] != want {
					t.Errorf("class 3 = %+v, want %+v", c.Classes[3], want)
				}
			},
		},
		{
			name: "commas and colons interchangeable, tc spelling aliases",
			in:   opts{tc: []string{"tc3:wred,min_th=60kb:max_th=1mb:probability=10%"}},
			check: func(t *testing.T, c *qdisc.Config) {
				if cc := c.Classes[3]; cc.MinThBytes != 60*units.KiB || cc.MaxThBytes != units.MiB || cc.MaxP != 0.1 {
					t.Errorf("class 3 = %+v", cc)
				}
			},
		},
		{
			name: "only min changes, rest kept",
			in:   opts{tc: []string{"3:min=100kb"}},
			check: func(t *testing.T, c *qdisc.Config) {
				if cc := c.Classes[3]; cc.MinThBytes != 100*units.KiB || cc.MaxThBytes != 1024000 || cc.ECN != qdisc.ECNWRED {
					t.Errorf("class 3 = %+v", cc)
				}
			},
		},
		{
			name: "step on roce keeps min as K unless given",
			in:   opts{tc: []string{"3:step:k=100kb"}},
			check: func(t *testing.T, c *qdisc.Config) {
				if cc := c.Classes[3]; cc.ECN != qdisc.ECNStep || cc.MinThBytes != 100*units.KiB {
					t.Errorf("class 3 = %+v", cc)
				}
			},
		},
		{
			name: "off with limit, strict, name, wred-drop, rate",
			in: opts{tc: []string{"0:off:limit=512kb", "6:no-strict", "5:name=bulk,strict",
				"3:wred-drop", "1:rate=100mbit"}},
			check: func(t *testing.T, c *qdisc.Config) {
				if c.Classes[0].LimitBytes != 512*units.KiB || c.Classes[6].Strict ||
					!c.Classes[5].Strict || c.Classes[5].Name != "bulk" || !c.Classes[3].WREDDrop ||
					c.Classes[1].Rate != 100*units.Mbit {
					t.Errorf("config = %+v", c.Classes)
				}
			},
		},
		{
			name: "applied in order",
			in:   opts{tc: []string{"2:step:k=10kb", "2:off", "2:limit=2mb"}},
			check: func(t *testing.T, c *qdisc.Config) {
				if cc := c.Classes[2]; cc.ECN != qdisc.ECNOff || cc.LimitBytes != 2*units.MiB {
					t.Errorf("class 2 = %+v", cc)
				}
			},
		},
		{
			name: "dscp lists and ranges, default class",
			in:   opts{dscp: []string{"24-27,30=tc3", "46=5"}, def: "2"},
			check: func(t *testing.T, c *qdisc.Config) {
				for _, d := range []int{24, 25, 26, 27, 30} {
					if c.DSCPClass[d] != 3 {
						t.Errorf("dscp %d -> %d, want 3", d, c.DSCPClass[d])
					}
				}
				if c.DSCPClass[28] != 0 || c.DSCPClass[46] != 5 || c.DefaultClass != 2 {
					t.Errorf("dscp 28 -> %d, 46 -> %d, default %d", c.DSCPClass[28], c.DSCPClass[46], c.DefaultClass)
				}
			},
		},
		{
			name: "ppfc on, then off",
			in:   opts{tc: []string{"3:xoff=1mb,xon=512kb,alarm=768kb", "5:xoff=512kb,alarm=256kb", "5:no-ppfc"}},
			check: func(t *testing.T, c *qdisc.Config) {
				if cc := c.Classes[3]; cc.XoffBytes != units.MiB || cc.XonBytes != 512*units.KiB || cc.AlarmBytes != 768*units.KiB || !c.PPFC() {
					t.Errorf("class 3 = %+v", cc)
				}
				if cc := c.Classes[5]; cc.XoffBytes != 0 || cc.XonBytes != 0 || cc.AlarmBytes != 0 {
					t.Errorf("class 5 = %+v", cc)
				}
			},
		},
		{
			name: "alarm off, alone on a class with ppfc",
			in:   opts{tc: []string{"3:xoff=1mb,xon=512kb,alarm=768kb", "3:alarm=0"}},
			check: func(t *testing.T, c *qdisc.Config) {
				if cc := c.Classes[3]; cc.XoffBytes != units.MiB || cc.AlarmBytes != 0 {
					t.Errorf("class 3 = %+v", cc)
				}
			},
		},
		{name: "xon without xoff", in: opts{tc: []string{"3:xon=1mb"}}, err: "--tc 3:xon=1mb: xon needs xoff: class 3 has no PPFC"},
		{name: "no-ppfc with thresholds", in: opts{tc: []string{"3:no-ppfc,xoff=1mb"}}, err: "no-ppfc turns PPFC off"},
		{name: "xoff above limit", in: opts{tc: []string{"3:xoff=4mb"}}, err: "class 3: ppfc: xoff (4mb) must not exceed limit (2mb)"},
		{name: "xon at xoff", in: opts{tc: []string{"3:xoff=1mb,xon=1mb"}}, err: "class 3: ppfc: xon (1mb) must be below xoff (1mb)"},
		{name: "alarm without xoff", in: opts{tc: []string{"3:alarm=768kb"}}, err: "--tc 3:alarm=768kb: alarm needs xoff: class 3 has no PPFC"},
		{name: "alarm at xon", in: opts{tc: []string{"3:xoff=1mb,xon=512kb,alarm=512kb"}},
			err: "class 3: ppfc: alarm (512kb) must be above xon (512kb) and below xoff (1mb), or 0 (off)"},
		{name: "no-ppfc with alarm", in: opts{tc: []string{"3:no-ppfc,alarm=1mb"}}, err: "no-ppfc turns PPFC off: give it without xoff, xon and alarm"},
		// Parse errors name the option, the value and what is allowed.
		{name: "class out of range", in: opts{tc: []string{"9:wred"}}, err: "--tc 9:wred: class 9 out of range 0-7"},
		{name: "class not a number", in: opts{tc: []string{"x:off"}}, err: `--tc x:off: class "x" is not a number (want 0-7)`},
		{name: "nothing to set", in: opts{tc: []string{"3"}}, err: "--tc 3: nothing to set for class 3"},
		{name: "unknown word", in: opts{tc: []string{"3:fast"}}, err: `--tc 3:fast: unknown setting "fast" (words: off, step`},
		{name: "unknown key", in: opts{tc: []string{"3:burst=1"}}, err: `--tc 3:burst=1: unknown key "burst"`},
		{name: "bad size", in: opts{tc: []string{"3:min=5zb"}}, err: `--tc 3:min=5zb: min: invalid size "5zb": unknown unit "zb"`},
		{name: "bad probability", in: opts{tc: []string{"3:p=1.5"}}, err: `--tc 3:p=1.5: p: invalid probability "1.5": out of range`},
		{name: "bad rate", in: opts{tc: []string{"3:rate=fast"}}, err: `--tc 3:rate=fast: rate: invalid rate "fast"`},
		{name: "duplicate key", in: opts{tc: []string{"3:min=1kb,min=2kb"}}, err: "--tc 3:min=1kb,min=2kb: min given twice"},
		{name: "bad name", in: opts{tc: []string{"3:name=ro ce"}}, err: `name "ro ce": only letters`},
		{name: "dscp out of range", in: opts{dscp: []string{"64=3"}}, err: "--dscp 64=3: dscp 64 out of range 0-63"},
		{name: "dscp class out of range", in: opts{dscp: []string{"26=8"}}, err: "--dscp 26=8: class 8 out of range 0-7"},
		{name: "dscp no class", in: opts{dscp: []string{"26"}}, err: "--dscp 26: want DSCP=CLASS"},
		{name: "dscp backwards range", in: opts{dscp: []string{"31-24=3"}}, err: "--dscp 31-24=3: dscp range 31-24 is backwards"},
		{name: "dscp not a number", in: opts{dscp: []string{"ef=5"}}, err: `--dscp ef=5: dscp "ef" is not a number (want 0-63)`},
		{name: "default class", in: opts{def: "8"}, err: "--default-class 8: class 8 out of range 0-7"},
		// Settings that do not fit the class's mode.
		{name: "k in wred mode", in: opts{tc: []string{"3:k=10kb"}}, err: "--tc 3:k=10kb: k is a setting of step but class 3 is in wred mode (e.g. 3:step:k=100kb)"},
		{name: "min in off mode", in: opts{tc: []string{"0:min=10kb"}}, err: "--tc 0:min=10kb: min is a setting of wred but class 0 is in off mode (e.g. 0:wred:min=50kb,max=1mb,p=0.1)"},
		{name: "min in step mode", in: opts{tc: []string{"3:step", "3:min=10kb"}}, err: "step mode takes k=SIZE"},
		{name: "wred from off needs curve", in: opts{tc: []string{"0:wred:min=10kb"}}, err: "--tc 0:wred:min=10kb: switching class 0 to wred needs max=SIZE, p=PROB"},
		{name: "step from off needs k", in: opts{tc: []string{"0:step"}}, err: "--tc 0:step: switching class 0 to step needs k=SIZE"},
		// Config.Validate messages come through.
		{name: "max above limit", in: opts{tc: []string{"3:max=4mb"}}, err: "class 3: wred: max_th (4mb) must not exceed limit (2mb)"},
		{name: "min above max", in: opts{tc: []string{"3:min=2mb"}}, err: "class 3: wred: max_th (1000kb) must be greater than min_th (2mb)"},
		{name: "p zero", in: opts{tc: []string{"3:p=0"}}, err: "class 3: wred: max_p (0) must be in (0, 1]"},
		{name: "wred-drop without ecn", in: opts{tc: []string{"0:wred-drop"}}, err: "class 0: wred_drop needs an ecn mode other than off"},
		{name: "zero limit", in: opts{tc: []string{"1:limit=0"}}, err: "class 1: limit (0b) must be greater than 0"},
		{name: "K at limit", in: opts{tc: []string{"6:step:k=256kb"}}, err: "class 6: step: K (256kb) must be below limit (256kb)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := qdisc.DefaultConfig(units.Gbit)
			e, err := qdisc.ParseEdits(tc.in.tc, tc.in.dscp, tc.in.def)
			if err == nil {
				err = e.Apply(&cfg)
			}
			if tc.err != "" {
				if err == nil {
					t.Fatalf("no error, want %q", tc.err)
				}
				if !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %q\nwant it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, &cfg)
		})
	}
}

func TestParseEditsReportsEveryError(t *testing.T) {
	_, err := qdisc.ParseEdits([]string{"9:off", "3:bogus"}, []string{"64=1"}, "")
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"--tc 9:off", "--tc 3:bogus", "--dscp 64=1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestDefaultConfigNeedsNoEdits(t *testing.T) {
	cfg := qdisc.DefaultConfig(units.Gbit)
	e, err := qdisc.ParseEdits(nil, nil, "")
	if err != nil || !e.Empty() {
		t.Fatalf("empty edits: %v %v", e, err)
	}
	if err := e.Apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg != qdisc.DefaultConfig(units.Gbit) {
		t.Error("empty edits changed the config")
	}
}
