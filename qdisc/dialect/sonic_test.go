package dialect_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/dialect"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// roundTrip renders cfg as SONiC and parses it back.
func roundTrip(tb testing.TB, cfg qdisc.Config, opt dialect.Options) (qdisc.Config, *dialect.Output) {
	tb.Helper()
	out, err := dialect.Render(&cfg, dialect.SONiC, opt)
	if err != nil {
		tb.Fatal(err)
	}
	if !json.Valid([]byte(out.Text)) {
		tb.Fatalf("not JSON:\n%s", out.Text)
	}
	back, err := dialect.ParseSONiC(strings.NewReader(out.Text))
	if err != nil {
		tb.Fatalf("%v\n%s", err, out.Text)
	}
	return back, out
}

// TestSONiCRoundTrip: lab → SONiC → lab gives the configuration back
// whenever the rendering has no notes.
func TestSONiCRoundTrip(t *testing.T) {
	wredDrop := portConfig(t, 40*units.Gbit, []string{"3:wred-drop", "1:name=storage:step:k=64kb,wred-drop"}, []string{"8-15=1"})
	unnamed := qdisc.DefaultConfig(400 * units.Gbit)
	for i := range unnamed.Classes {
		unnamed.Classes[i].Name = ""
	}
	for _, tc := range []struct {
		name string
		cfg  qdisc.Config
	}{
		// WRED, PPFC lossless, step, strict CNP.
		{"lossless", ports[1].cfg(t)},
		// WRED, strict CNP, no PPFC.
		{"seed000", ports[2].cfg(t)},
		// Not-ECT dropped on the curve, on a WRED and a step class.
		{"wred-drop", wredDrop},
		// No names: no FABRICLAB class entries.
		{"unnamed", unnamed},
		// A lossless class whose xoff is its limit: no headroom.
		{"no headroom", portConfig(t, 10*units.Gbit, []string{"3:xoff=2mb,xon=1mb"}, nil)},
		// Two strict classes, and a lossless step class.
		{"two strict", portConfig(t, 10*units.Gbit, []string{"5:strict", "4:step:k=0b,xoff=512kb,xon=256kb"}, []string{"46=5", "4=4"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			back, out := roundTrip(t, tc.cfg, dialect.Options{Interface: "Ethernet8"})
			if len(out.Notes) > 0 {
				t.Fatalf("notes %q: the configuration is not whole in SONiC", out.Notes)
			}
			if !reflect.DeepEqual(back, tc.cfg) {
				t.Errorf("round trip changed the configuration:\n got %+v\nwant %+v", back, tc.cfg)
			}
		})
	}
}

// TestSONiCRoundTripDemo: the demo's port comes back but for what the
// notes say SONiC cannot hold, its PPFC alarm.
func TestSONiCRoundTripDemo(t *testing.T) {
	cfg := ports[0].cfg(t)
	back, out := roundTrip(t, cfg, dialect.Options{})
	if len(out.Notes) != 1 || !strings.Contains(out.Notes[0], "alarm 896kb") {
		t.Fatalf("notes %q, want the alarm's", out.Notes)
	}
	want := cfg
	want.Classes[3].AlarmBytes = 0
	if !reflect.DeepEqual(back, want) {
		t.Errorf("got %+v\nwant %+v", back, want)
	}
}

// TestParseSONiCPort picks a port by name among several.
func TestParseSONiCPort(t *testing.T) {
	a, b := ports[1].cfg(t), ports[2].cfg(t)
	outA, err := dialect.Render(&a, dialect.SONiC, dialect.Options{Interface: "Ethernet0"})
	if err != nil {
		t.Fatal(err)
	}
	outB, err := dialect.Render(&b, dialect.SONiC, dialect.Options{Interface: "Ethernet4"})
	if err != nil {
		t.Fatal(err)
	}
	// Merge the two files, as config_db holds every port.
	var dbA, dbB map[string]map[string]any
	if err := json.Unmarshal([]byte(outA.Text), &dbA); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(outB.Text), &dbB); err != nil {
		t.Fatal(err)
	}
	for table, entries := range dbB {
		if dbA[table] == nil {
			dbA[table] = map[string]any{}
		}
		for k, v := range entries {
			dbA[table][k] = v
		}
	}
	dbA["DEVICE_METADATA"] = map[string]any{"localhost": map[string]any{"hostname": "leaf1", "buffer_model": "traditional"}}
	merged, _ := json.Marshal(dbA)
	if _, err := dialect.ParseSONiC(strings.NewReader(string(merged))); err == nil || !strings.Contains(err.Error(), "/PORT_QOS_MAP: \"Ethernet0,Ethernet4\": must hold exactly one port") {
		t.Errorf("err = %v, want the two ports named", err)
	}
	got, err := dialect.ParseSONiCPort(strings.NewReader(string(merged)), "Ethernet4")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, b) {
		t.Errorf("Ethernet4: got %+v\nwant %+v", got, b)
	}
}

// TestParseSONiCErrors: each error names the JSON path, the value and
// what is allowed.
func TestParseSONiCErrors(t *testing.T) {
	cfg := ports[1].cfg(t)
	out, err := dialect.Render(&cfg, dialect.SONiC, dialect.Options{})
	if err != nil {
		t.Fatal(err)
	}
	good := out.Text
	for _, tc := range []struct {
		name string
		edit func(db map[string]map[string]map[string]any)
		want string
	}{
		{"probability over 100", func(db map[string]map[string]map[string]any) {
			for _, c := range []string{"green", "yellow", "red"} {
				db["WRED_PROFILE"]["Ethernet0_q3"][c+"_drop_probability"] = "150"
			}
		}, `sonic: /WRED_PROFILE/Ethernet0_q3/green_drop_probability: "150": must be percent, 1 to 100`},
		{"colours differ", func(db map[string]map[string]map[string]any) {
			db["WRED_PROFILE"]["Ethernet0_q3"]["red_min_threshold"] = "1"
		}, `sonic: /WRED_PROFILE/Ethernet0_q3/red_min_threshold: "1": must be green_min_threshold's (153600): the lab has no colours`},
		{"max below min", func(db map[string]map[string]map[string]any) {
			for _, c := range []string{"green", "yellow", "red"} {
				db["WRED_PROFILE"]["Ethernet0_q3"][c+"_max_threshold"] = "100"
			}
		}, `/WRED_PROFILE/Ethernet0_q3/green_max_threshold: "100": must be bytes, at least green_min_threshold, 153600 to 4294967295`},
		{"ecn off", func(db map[string]map[string]map[string]any) {
			db["WRED_PROFILE"]["Ethernet0_q3"]["ecn"] = "ecn_none"
		}, `/WRED_PROFILE/Ethernet0_q3/ecn: "ecn_none": must be ecn_all or ecn_green`},
		{"not a string", func(db map[string]map[string]map[string]any) {
			db["SCHEDULER"]["Ethernet0_port"]["pir"] = 12500000000
		}, `/SCHEDULER/Ethernet0_port/pir: "12500000000": must be a string`},
		{"unknown field", func(db map[string]map[string]map[string]any) {
			db["QUEUE"]["Ethernet0|3"]["pir"] = "100"
		}, `/QUEUE/Ethernet0|3/pir: "\"100\"": not a field fabriclab reads here (it reads scheduler, wred_profile)`},
		{"dangling reference", func(db map[string]map[string]map[string]any) {
			db["QUEUE"]["Ethernet0|5"]["wred_profile"] = "nope"
		}, `/QUEUE/Ethernet0|5/wred_profile: "nope": names no WRED_PROFILE entry`},
		{"missing queue", func(db map[string]map[string]map[string]any) {
			delete(db["QUEUE"], "Ethernet0|7")
		}, `/QUEUE/Ethernet0|7: missing: every queue 0 to 7 needs its scheduler`},
		{"dscp class", func(db map[string]map[string]map[string]any) {
			db["DSCP_TO_TC_MAP"]["Ethernet0"]["26"] = "8"
		}, `/DSCP_TO_TC_MAP/Ethernet0/26: "8": must be a traffic class, 0 to 7`},
		{"weights differ", func(db map[string]map[string]map[string]any) {
			db["SCHEDULER"]["heavy"] = map[string]any{"type": "DWRR", "weight": "5"}
			db["QUEUE"]["Ethernet0|5"]["scheduler"] = "heavy"
		}, `/SCHEDULER/heavy/weight: "5": must be 1 as at /SCHEDULER/Ethernet0_dwrr/weight: the lab shares its non-strict classes equally`},
		{"queue map", func(db map[string]map[string]map[string]any) {
			db["TC_TO_QUEUE_MAP"]["Ethernet0"]["3"] = "4"
		}, `/TC_TO_QUEUE_MAP/Ethernet0/3: "4": must be 3: the lab's class N is traffic class, queue, priority group and PFC priority N`},
		{"pfc without pg", func(db map[string]map[string]map[string]any) {
			db["PORT_QOS_MAP"]["Ethernet0"]["pfc_enable"] = "3,4"
		}, `/BUFFER_PG/Ethernet0|4: missing: pfc_enable lists priority 4`},
		{"pfc list", func(db map[string]map[string]map[string]any) {
			db["PORT_QOS_MAP"]["Ethernet0"]["pfc_enable"] = "3,9"
		}, `/PORT_QOS_MAP/Ethernet0/pfc_enable: "3,9": must list priorities 0 to 7, each once`},
		{"headroom", func(db map[string]map[string]map[string]any) {
			db["BUFFER_PROFILE"]["Ethernet0_pg3"]["xoff"] = "1000"
		}, `/BUFFER_PROFILE/Ethernet0_pg3/xoff: "1000": must be 2097152: the headroom is the queue's limit (4194304) less static_th (2097152)`},
		{"xon above xoff", func(db map[string]map[string]map[string]any) {
			db["BUFFER_PROFILE"]["Ethernet0_pg3"]["xon"] = "3000000"
		}, `/BUFFER_PROFILE/Ethernet0_pg3/xon: "3000000": must be the resume threshold in bytes, below static_th, 0 to 2097151`},
		{"dynamic threshold", func(db map[string]map[string]map[string]any) {
			db["BUFFER_PROFILE"]["Ethernet0_q0"]["dynamic_th"] = "3"
		}, `/BUFFER_PROFILE/Ethernet0_q0/dynamic_th: "\"3\"": not a field fabriclab reads here (it reads pool, size, static_th)`},
		{"no shaper", func(db map[string]map[string]map[string]any) {
			delete(db["PORT_QOS_MAP"]["Ethernet0"], "scheduler")
		}, `/PORT_QOS_MAP/Ethernet0/scheduler: missing: the port shaper: a SCHEDULER with pir (bytes/s), the port's rate`},
		{"step probability", func(db map[string]map[string]map[string]any) {
			for _, c := range []string{"green", "yellow", "red"} {
				db["WRED_PROFILE"]["Ethernet0_q5"][c+"_drop_probability"] = "50"
			}
		}, `/WRED_PROFILE/Ethernet0_q5/green_drop_probability: "50": must be 100: min = max is a step`},
		{"bad name", func(db map[string]map[string]map[string]any) {
			db["FABRICLAB"]["Ethernet0|3"]["name"] = "r o c e"
		}, `/FABRICLAB/Ethernet0|3/name: "r o c e": must be 1 to 32 letters`},
		{"limit below max_th", func(db map[string]map[string]map[string]any) {
			db["BUFFER_PROFILE"]["Ethernet0_q3"]["static_th"] = "2097152"
			db["BUFFER_PROFILE"]["Ethernet0_pg3"]["xoff"] = "0"
		}, `sonic: the port read is not a valid configuration: class 3: wred: max_th (3mb) must not exceed limit (2mb)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var db map[string]map[string]map[string]any
			if err := json.Unmarshal([]byte(good), &db); err != nil {
				t.Fatal(err)
			}
			tc.edit(db)
			b, _ := json.Marshal(db)
			_, err := dialect.ParseSONiC(strings.NewReader(string(b)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant %q", err, tc.want)
			}
			var pe *dialect.ParseError
			if errors.As(err, &pe) && !strings.HasPrefix(tc.want, "sonic: the port read") && pe.Path == "" {
				t.Errorf("no path in %+v", pe)
			}
		})
	}
	for in, want := range map[string]string{
		"":                                     `sonic: /: "": must be a JSON object of config_db tables`,
		"[1,2]":                                `sonic: /: "[1,2]": must be a JSON object of config_db tables`,
		"{}":                                   `sonic: /PORT_QOS_MAP: missing: must hold exactly one port`,
		`{"QUEUE": 3}`:                         `sonic: /PORT_QOS_MAP: missing`,
		`{"PORT_QOS_MAP": []}`:                 `sonic: /PORT_QOS_MAP: "[]": must be an object of entries`,
		`{"PORT_QOS_MAP": {"Ethernet0": "x"}}`: `sonic: /PORT_QOS_MAP/Ethernet0: "\"x\"": must be an object of fields`,
		`{"PORT_QOS_MAP": {"Ethernet0": {}}}`:  `sonic: /PORT_QOS_MAP/Ethernet0/dscp_to_tc_map: missing`,
		`{"PORT_QOS_MAP": {"a/b~c": {"x": "1"}}}`:   `sonic: /PORT_QOS_MAP/a~1b~0c/x:`,
		`{"PORT_QOS_MAP": {"global": {}, "E": {}}}`: `sonic: /PORT_QOS_MAP/E/dscp_to_tc_map: missing`,
	} {
		if _, err := dialect.ParseSONiC(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSONiC(%q) = %v\nwant %q", in, err, want)
		}
	}
}

// TestParseSONiCBracketRefs reads the older "[TABLE|name]" references.
func TestParseSONiCBracketRefs(t *testing.T) {
	cfg := ports[2].cfg(t)
	out, err := dialect.Render(&cfg, dialect.SONiC, dialect.Options{})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(out.Text, `"scheduler": "Ethernet0_dwrr"`, `"scheduler": "[SCHEDULER|Ethernet0_dwrr]"`)
	text = strings.ReplaceAll(text, `"wred_profile": "Ethernet0_q3"`, `"wred_profile": "[WRED_PROFILE|Ethernet0_q3]"`)
	got, err := dialect.ParseSONiC(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, cfg) {
		t.Errorf("got %+v", got)
	}
	bad := strings.Replace(text, "[SCHEDULER|Ethernet0_dwrr]", "[QUEUE|Ethernet0_dwrr]", 1)
	if _, err := dialect.ParseSONiC(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), `"[QUEUE|Ethernet0_dwrr]": must name a SCHEDULER entry`) {
		t.Errorf("err = %v", err)
	}
}

func FuzzParseSONiC(f *testing.F) {
	for _, name := range []string{"demo.json", "lossless.json", "seed000.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add(`{"PORT_QOS_MAP": {"E": {"dscp_to_tc_map": "[DSCP_TO_TC_MAP|m]"}}, "DSCP_TO_TC_MAP": {"m": {"1": "7"}}}`)
	f.Add(`{"QUEUE": {"E|3-9": {}}, "PORT_QOS_MAP": {"E": {}}}`)
	f.Fuzz(func(t *testing.T, in string) {
		cfg, err := dialect.ParseSONiC(strings.NewReader(in))
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("ParseSONiC returned an invalid configuration: %v", err)
		}
		// What it reads it can say again, and read back the same.
		out, err := dialect.Render(&cfg, dialect.SONiC, dialect.Options{})
		if err != nil {
			t.Fatalf("read %+v but cannot render it: %v", cfg, err)
		}
		back, err := dialect.ParseSONiC(strings.NewReader(out.Text))
		if err != nil {
			t.Fatalf("cannot read its own rendering: %v", err)
		}
		if !reflect.DeepEqual(back, cfg) {
			t.Fatalf("round trip changed %+v into %+v", cfg, back)
		}
	})
}
