package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/fabriclab/fabriclab/qdisc/tunnel"
)

// TestTunnelCommands: attach, show, configure, stats, detach of a tunnel PE
// on the lab's swp0, the errors naming the option and the value, and
// nothing left after detach.
func TestTunnelCommands(t *testing.T) {
	l := newLab(t)
	t.Cleanup(func() { exec.Command(l.bin, "tunnel", "detach", "--netns", l.sw, "--dev", "swp0").Run() })
	run := func(args ...string) (string, string, int) {
		return l.portctl(t, append([]string{"tunnel", args[0], "--netns", l.sw, "--dev", "swp0"}, args[1:]...)...)
	}
	// Offloads on: refused with the command that fixes it.
	_, errOut, code := run("attach", "--local", "198.18.0.1", "--route", "198.19.2.0/24=198.18.0.2")
	if code != 1 || !strings.Contains(errOut, "ethtool -K swp0 gro off") {
		t.Fatalf("attach on a device with offloads: exit %d, %s", code, errOut)
	}
	sh(t, "ip", "netns", "exec", l.sw, "ethtool", "-K", "swp0", "gro", "off", "tso", "off", "gso", "off", "tx-udp-segmentation", "off")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"attach", "--route", "198.19.2.0/24=198.18.0.2"}, "attach needs --local"},
		{[]string{"attach", "--local", "198.18.0.1", "--route", "198.19.2.0/24"}, "--route 198.19.2.0/24: want PREFIX=REMOTE"},
		{[]string{"attach", "--local", "198.18.0.1", "--route", "198.19.2.7/24=198.18.0.2"}, "routes[0].prefix (198.19.2.7/24): host bits set"},
		{[]string{"attach", "--local", "198.18.0.1", "--route", "198.19.2.0/24=198.18.0.2", "--ttl", "0"}, "--ttl 0: want 1 to 255"},
		{[]string{"attach", "--local", "198.18.0.1", "--route", "198.19.2.0/24=198.18.0.2", "--mtu", "50"}, "mtu (50): want 88 to 65535"},
		{[]string{"attach", "--local", "198.18.0.1", "--route", "198.19.2.0/24=198.18.0.2", "--ecn", "full"}, "--ecn full: want normal or compat"},
	} {
		_, errOut, code := run(c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}

	out, errOut, code := run("attach", "--local", "198.18.0.1", "--route", "198.19.2.0/24=198.18.0.2", "--ecn", "compat")
	if code != 0 {
		t.Fatalf("attach: exit %d\n%s%s", code, out, errOut)
	}
	mustContain(t, "attach", out, "local 198.18.0.1", "ecn compat", "mtu 1500 (inner 1480)", "route 198.19.2.0/24 via PE 198.18.0.2")
	if _, errOut, code := run("attach", "--local", "198.18.0.1", "--route", "198.19.2.0/24=198.18.0.2"); code != 1 || !strings.Contains(errOut, "already attached") {
		t.Errorf("second attach: exit %d, %s", code, errOut)
	}
	out, _, _ = run("configure", "--two-threshold", "--route", "198.19.2.0/24=198.18.0.2", "--route", "198.19.3.0/24=198.18.0.2", "-j")
	var cfg tunnel.Config
	if err := json.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatalf("configure -j: %v\n%s", err, out)
	}
	if !cfg.TwoThreshold || cfg.ECN != tunnel.Compat || len(cfg.Routes) != 2 || cfg.Local.String() != "198.18.0.1" {
		t.Errorf("configure kept or changed the wrong things: %+v", cfg)
	}
	out, _, _ = run("show")
	mustContain(t, "show", out, "two-threshold on", "route 198.19.3.0/24 via PE 198.18.0.2")

	// A packet for a tunnelled prefix leaves encapsulated.
	sh(t, "ip", "-n", l.sw, "route", "add", "198.19.2.0/24", "via", "198.18.0.2")
	sendUDPIn(t, l.sw, "198.19.2.9:9", 3)
	out, _, _ = run("stats", "-j")
	var s tunnel.Stats
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("stats -j: %v\n%s", err, out)
	}
	if s.Encap.Packets != 3 || s.Encap.OuterECN[tunnel.NotECT] != 3 {
		t.Errorf("3 datagrams: encap counters %+v", s.Encap)
	}
	out, _, _ = run("stats")
	mustContain(t, "stats", out, "encap: 3 packets", "inner \\ outer", "drop(!!!)")

	if out, errOut, code := run("detach"); code != 0 || !strings.Contains(out, "detached") {
		t.Fatalf("detach: exit %d %s%s", code, out, errOut)
	}
	if _, errOut, code := run("stats"); code != 1 || !strings.Contains(errOut, "no tunnel PE is attached") {
		t.Errorf("stats after detach: exit %d, %s", code, errOut)
	}
	prefix := "tunnel_" + l.pinPrefix(t)
	for _, dir := range []string{filepath.Join(filepath.Dir(tunnel.MetaRoot), "tunnels"), "/sys/fs/bpf/fabriclab"} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) {
				t.Errorf("detach left %s", filepath.Join(dir, e.Name()))
			}
		}
	}
}

// sendUDPIn sends n datagrams to dst from the named namespace.
func sendUDPIn(t *testing.T, nsName, dst string, n int) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	h, err := netns.GetFromName(nsName)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		t.Fatal(err)
	}
	defer netns.Set(orig)
	c, err := net.Dial("udp4", dst)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range n {
		c.Write([]byte("tunnelled"))
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
}
