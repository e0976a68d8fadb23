package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestCLIUsage checks help and command-line errors, which never touch the
// kernel: exit 2 with a "portctl: ..." message naming the problem.
func TestCLIUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"help"}, 0, "Usage: portctl COMMAND", ""},
		{[]string{"--help"}, 0, "Examples:", ""},
		{[]string{"-h"}, 0, "Commands:", ""},
		{[]string{"help", "stats"}, 0, "--watch INTERVAL", ""},
		{[]string{"attach", "--help"}, 0, "--tc CLASS:ITEM", ""},
		{[]string{"configure", "-h"}, 0, "Usage: portctl configure", ""},
		{[]string{"show", "--help"}, 0, "Usage: portctl show", ""},
		{[]string{"detach", "--help"}, 0, "Usage: portctl detach", ""},
		{[]string{"sweep", "--help"}, 0, "Usage: portctl sweep", ""},
		{[]string{"dispatcher", "--help"}, 0, "Usage: portctl dispatcher [-j]", ""},
		{[]string{"dispatcher", "now"}, 2, "", `portctl: unexpected argument "now" (dispatcher takes only -j)`},
		{[]string{"sweep", "now"}, 2, "", `portctl: unexpected argument "now" (sweep takes no options)`},
		{[]string{"sweep", "--dev", "swp0"}, 2, "", "portctl: flag provided but not defined: -dev"},
		{nil, 2, "", "Usage: portctl COMMAND"},
		{[]string{"help", "frob"}, 2, "", `portctl: unknown command "frob"`},
		{[]string{"frob"}, 2, "", `portctl: unknown command "frob"`},
		{[]string{"show"}, 2, "", "portctl: --dev is required (the port device, e.g. --dev swp0), or --rate RATE or --from sonic --file FILE"},
		{[]string{"show", "--help"}, 0, "--as DIALECT", ""},
		{[]string{"help", "show"}, 0, "sonic   SONiC 202305 config_db.json", ""},
		{[]string{"show", "--rate", "1gbit", "--as", "ios"}, 2, "", "portctl: --as ios: want sonic, eos, nxos or junos\nRun 'portctl show --help' for usage."},
		{[]string{"show", "--dev", "swp0", "--as", "cisco"}, 2, "", "portctl: --as cisco: want sonic, eos, nxos or junos"},
		{[]string{"show", "--dev", "swp0", "--rate", "1gbit"}, 2, "", "portctl: show --dev prints the port as it is"},
		{[]string{"show", "--dev", "swp0", "--tc", "3:step:k=1kb"}, 2, "", "portctl: show --dev prints the port as it is"},
		{[]string{"show", "--dev", "swp0", "-j", "--as", "sonic"}, 2, "", "portctl: -j and --as sonic: give one"},
		{[]string{"show", "--rate", "1gbit", "--interface", "Ethernet8"}, 2, "", "portctl: --interface and --port-buffer go with --as DIALECT"},
		{[]string{"show", "--rate", "1gbit", "--as", "eos", "--port-buffer", "32mb"}, 2, "", "portctl: --port-buffer 32mb: only --as junos takes it"},
		{[]string{"show", "--rate", "1gbit", "--as", "junos", "--port-buffer", "lots"}, 2, "", "portctl: --port-buffer lots: want a size greater than 0"},
		{[]string{"show", "--from", "eos", "--file", "x.cfg"}, 2, "", "portctl: --from eos: only sonic is read back"},
		{[]string{"show", "--from", "sonic"}, 2, "", "portctl: --from sonic needs --file FILE"},
		{[]string{"show", "--file", "x.json"}, 2, "", "portctl: --file and --sonic-port go with --from sonic"},
		{[]string{"show", "--netns", "sw", "--rate", "1gbit"}, 2, "", "portctl: --netns goes with --dev"},
		{[]string{"show", "--rate", "1gbit", "--tc", "3:max=8mb"}, 2, "", "portctl: invalid configuration: class 3: wred: max_th (8mb) must not exceed limit (2mb)"},
		{[]string{"show", "--rate", "10gbit", "--tc", "3:codel:target=50us,interval=1ms", "--as", "nxos"}, 1, "", "portctl: nxos: class 3 (roce): ecn (codel): no vendor equivalent"},
		{[]string{"show", "--rate", "10gbit", "--tc", "3:p=0.015", "--as", "sonic"}, 1, "", "portctl: sonic: class 3 (roce): max_p (0.015): must be a whole percent"},
		{[]string{"show", "--rate", "1gbit", "--as", "sonic"}, 0, `"pfc_enable": ""`, ""},
		{[]string{"show", "--rate", "1gbit", "--as", "JUNOS", "--interface", "et-0/0/9"}, 0, "shaping-rate 1g;", ""},
		{[]string{"show", "--rate", "1gbit"}, 0, "config: portctl's defaults  rate 1gbit  (no port)", ""},
		{[]string{"show", "--from", "sonic", "--file", "/nonexistent/x.json"}, 1, "", "portctl: open /nonexistent/x.json: no such file"},
		{[]string{"configure", "--help"}, 0, "--from sonic       take the configuration from --file", ""},
		{[]string{"configure", "--dev", "swp0", "--from", "junos", "--file", "x"}, 2, "", "portctl: --from junos: only sonic is read back"},
		{[]string{"configure", "--dev", "swp0", "--from", "sonic", "--file", "/nonexistent/x.json"}, 1, "", "portctl: open /nonexistent/x.json: no such file"},
		{[]string{"configure", "--dev", "swp0", "--file", "x.json"}, 2, "", "portctl: --file and --sonic-port go with --from sonic"},
		{[]string{"configure", "--dev", "swp0", "--as", "sonic"}, 2, "", "portctl: flag provided but not defined: -as"},
		{[]string{"show", "--dev", "swp0", "extra"}, 2, "", `portctl: unexpected argument "extra"`},
		{[]string{"show", "--dev", "swp0", "--bogus"}, 2, "", "portctl: flag provided but not defined: -bogus"},
		{[]string{"attach", "--dev", "swp0"}, 2, "", "portctl: --rate is required"},
		{[]string{"attach", "--dev", "swp0", "--rate", "1gbt"}, 2, "", `portctl: --rate 1gbt: invalid rate "1gbt"`},
		{[]string{"attach", "--dev", "swp0", "--rate", "0"}, 2, "", "portctl: --rate 0: rate must be greater than 0"},
		{[]string{"attach", "--dev", "swp0", "--rate", "1gbit", "--mode", "tun"}, 2, "", "portctl: --mode tun: want veth or virtual"},
		{[]string{"attach", "--dev", "swp0", "--rate", "1gbit", "--mode", "virtual", "--peer-dev", "eth0"}, 2, "", "only apply to --mode veth"},
		{[]string{"attach", "--dev", "swp0", "--rate", "1gbit", "--tc", "9:off"}, 2, "", "portctl: --tc 9:off: class 9 out of range 0-7\nRun 'portctl attach --help' for usage."},
		{[]string{"attach", "--dev", "swp0", "--rate", "1gbit", "--dscp", "64=3"}, 2, "", "portctl: --dscp 64=3: dscp 64 out of range 0-63"},
		{[]string{"attach", "--dev", "swp0", "--rate", "1gbit", "--tc", "3:max=8mb"}, 2, "", "portctl: invalid configuration: class 3: wred: max_th (8mb) must not exceed limit (2mb)"},
		{[]string{"configure", "--dev", "swp0"}, 2, "", "portctl: nothing to change: give --rate, class options (--tc, --dscp) or --from sonic --file FILE"},
		{[]string{"configure", "--dev", "swp0", "--tc", "3:p=2"}, 2, "", `portctl: --tc 3:p=2: p: invalid probability "2"`},
		{[]string{"stats", "--dev", "swp0", "--count", "2"}, 2, "", "portctl: --count needs --watch"},
		{[]string{"stats", "--dev", "swp0", "--watch", "1s", "--count", "0"}, 2, "", "portctl: --count 0: must be at least 1"},
		{[]string{"stats", "--dev", "swp0", "--watch", "1ms"}, 2, "", "portctl: --watch 1ms: interval must be 10ms to 24h"},
		{[]string{"stats", "--dev", "swp0", "--watch", "soon"}, 2, "", `portctl: --watch soon: invalid time "soon"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tc.args, &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, errb.String())
			}
			if tc.stdout != "" && !strings.Contains(out.String(), tc.stdout) {
				t.Errorf("stdout %q lacks %q", out.String(), tc.stdout)
			}
			if tc.stderr != "" && !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("stderr %q lacks %q", errb.String(), tc.stderr)
			}
			if tc.code == 0 && errb.Len() != 0 {
				t.Errorf("stderr on success: %q", errb.String())
			}
		})
	}
}

func TestParseInterval(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"1": time.Second, "0.5": 500 * time.Millisecond, "1s": time.Second, "250ms": 250 * time.Millisecond,
	} {
		if got, err := parseInterval(in); err != nil || got != want {
			t.Errorf("parseInterval(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

// TestHelpFitsATerminal keeps help lines within 80 columns.
func TestHelpFitsATerminal(t *testing.T) {
	for name, text := range map[string]string{"main": mainHelp, "attach": attachHelp, "configure": configureHelp,
		"show": showHelp, "stats": statsHelp, "detach": detachHelp, "sweep": sweepHelp, "dispatcher": dispatcherHelp} {
		for _, l := range strings.Split(text, "\n") {
			if len(l) > 80 {
				t.Errorf("%s help: line of %d columns: %q", name, len(l), l)
			}
		}
	}
}

// TestShowAsSONiC: show --as sonic writes a file show --from sonic reads
// back, the demo's port but for its PPFC alarm (which SONiC cannot hold).
func TestShowAsSONiC(t *testing.T) {
	demo := []string{"--rate", "500mbit", "--tc", "3:wred:min=50kb,max=1000kb,p=0.1,limit=2mb,xoff=1mb,xon=768kb,alarm=896kb"}
	show := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(append([]string{"show"}, args...), &out, &errb); code != 0 {
			t.Fatalf("portctl show %v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	file := filepath.Join(t.TempDir(), "demo.json")
	if err := os.WriteFile(file, []byte(show(append(demo, "--as", "sonic", "--interface", "Ethernet16")...)), 0o644); err != nil {
		t.Fatal(err)
	}
	var want, got qdisc.Config
	if err := json.Unmarshal([]byte(show(append(demo, "-j")...)), &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(show("--from", "sonic", "--file", file, "-j")), &got); err != nil {
		t.Fatal(err)
	}
	want.Classes[3].AlarmBytes = 0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back %+v\nwant %+v", got, want)
	}
	// The file's port in another dialect, with class options on top.
	eos := show("--from", "sonic", "--file", file, "--tc", "3:min=100kb", "--as", "eos")
	for _, w := range []string{"! " + file + " (sonic), rendered by fabriclab for Arista EOS 4.30", "minimum-threshold 100 kbytes", "priority-flow-control priority 3 no-drop"} {
		if !strings.Contains(eos, w) {
			t.Errorf("--as eos lacks %q:\n%s", w, eos)
		}
	}
	if got := show("--from", "sonic", "--file", file); !strings.HasPrefix(got, "config: "+file+" (sonic)  rate 500mbit  (no port)\n") {
		t.Errorf("show --from sonic:\n%s", got)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"show", "--from", "sonic", "--file", file, "--sonic-port", "Ethernet0"}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "portctl: "+file+": sonic: /PORT_QOS_MAP/Ethernet0: missing") {
		t.Errorf("--sonic-port Ethernet0: exit %d, %q", code, errb.String())
	}
}

// TestTakeFrom: configure --from keeps the port's class of non-IP frames
// and its names where the file has none.
func TestTakeFrom(t *testing.T) {
	cur := qdisc.DefaultConfig(units.Gbit)
	cur.DefaultClass = 7
	file := qdisc.DefaultConfig(10 * units.Gbit)
	file.Classes[3].Name, file.Classes[5].Name = "", "bulk"
	got := takeFrom(cur, file)
	if got.DefaultClass != 7 || got.Rate != 10*units.Gbit || got.Classes[3].Name != "roce" || got.Classes[5].Name != "bulk" {
		t.Errorf("takeFrom: %+v", got)
	}
}
