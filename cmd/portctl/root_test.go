package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/dispatch"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// lab is a veth pair between two fresh namespaces: swp0 in sw (the port),
// eth0 in rx (the far end, which runs the dequeue hook).
type lab struct {
	bin    string
	sw, rx string
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func newLab(t *testing.T) *lab {
	labtest.RequireRoot(t)
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: %v", tool, err)
		}
	}
	l := &lab{
		bin: filepath.Join(t.TempDir(), "portctl"),
		sw:  fmt.Sprintf("pctl-%d-a", os.Getpid()),
		rx:  fmt.Sprintf("pctl-%d-b", os.Getpid()),
	}
	if out, err := exec.Command("go", "build", "-o", l.bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	sh(t, "ip", "netns", "add", l.sw)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", l.sw).Run() })
	sh(t, "ip", "netns", "add", l.rx)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", l.rx).Run() })
	// Registered after the namespaces, so it runs before they go: a
	// failed test must not leave pins behind.
	t.Cleanup(func() { l.forceDetach() })
	sh(t, "ip", "-n", l.sw, "link", "add", "swp0", "type", "veth", "peer", "name", "eth0", "netns", l.rx)
	sh(t, "ip", "-n", l.sw, "addr", "add", "198.18.0.1/30", "dev", "swp0")
	sh(t, "ip", "-n", l.rx, "addr", "add", "198.18.0.2/30", "dev", "eth0")
	sh(t, "ip", "-n", l.sw, "link", "set", "swp0", "up")
	sh(t, "ip", "-n", l.rx, "link", "set", "eth0", "up")
	// The dequeue hook must see packets one by one.
	if _, err := exec.LookPath("ethtool"); err == nil {
		exec.Command("ip", "netns", "exec", l.rx, "ethtool", "-K", "eth0", "gro", "off").Run()
	}
	return l
}

// pinPrefix is how package qdisc names the pins of ports in the sw netns.
func (l *lab) pinPrefix(t *testing.T) string {
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/var/run/netns", l.sw), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("ns%d_", st.Ino)
}

func (l *lab) forceDetach() {
	exec.Command(l.bin, "detach", "--netns", l.sw, "--dev", "swp0").Run()
	var st syscall.Stat_t
	if syscall.Stat(filepath.Join("/var/run/netns", l.sw), &st) == nil {
		name := fmt.Sprintf("ns%d_swp0", st.Ino)
		os.RemoveAll(filepath.Join(qdisc.PinRoot, name))
		os.Remove(filepath.Join(qdisc.MetaRoot, name+".json"))
	}
}

// portctl runs the binary and returns stdout, stderr and the exit code.
func (l *lab) portctl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(l.bin, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("portctl %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errb.String(), code
}

// ok runs portctl on the lab's port and fails the test unless it exits 0.
func (l *lab) ok(t *testing.T, cmd string, args ...string) string {
	t.Helper()
	args = append([]string{cmd, "--netns", l.sw, "--dev", "swp0"}, args...)
	out, errOut, code := l.portctl(t, args...)
	if code != 0 {
		t.Fatalf("portctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func mustContain(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, text)
		}
	}
}

// checkDetached checks that nothing of the port is left: no pins, no port
// record, no HTB or clsact on either end of the veth.
func (l *lab) checkDetached(t *testing.T) {
	t.Helper()
	prefix := l.pinPrefix(t)
	for _, dir := range []string{qdisc.PinRoot, qdisc.MetaRoot} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) {
				t.Errorf("detach left %s", filepath.Join(dir, e.Name()))
			}
		}
	}
	for _, dev := range []struct{ ns, dev string }{{l.sw, "swp0"}, {l.rx, "eth0"}} {
		out := sh(t, "tc", "-n", dev.ns, "qdisc", "show", "dev", dev.dev)
		for _, bad := range []string{"htb", "bfifo", "clsact"} {
			if strings.Contains(out, bad) {
				t.Errorf("detach left a %s qdisc on %s in %s:\n%s", bad, dev.dev, dev.ns, out)
			}
		}
		if !strings.Contains(out, "noqueue") {
			t.Errorf("%s in %s does not have its default qdisc back:\n%s", dev.dev, dev.ns, out)
		}
	}
	if _, errOut, code := l.portctl(t, "show", "--netns", l.sw, "--dev", "swp0"); code != 1 || !strings.Contains(errOut, "no port is attached") {
		t.Errorf("show after detach: exit %d, %q; want 1 and \"no port is attached\"", code, errOut)
	}
}

// send sends UDP packets with the given TOS byte from the sw namespace
// towards rx, through the port, by running this test binary there.
func (l *lab) send(t *testing.T, tos, n int) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", l.sw, os.Args[0], "-test.run=^TestHelperSend$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORTCTL_HELPER_SEND=198.18.0.2:9,%d,%d", tos, n))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("send: %v\n%s", err, out)
	}
}

// TestHelperSend is not a test: send runs it inside a namespace.
func TestHelperSend(t *testing.T) {
	spec := os.Getenv("PORTCTL_HELPER_SEND")
	if spec == "" {
		return
	}
	var addr string
	var tos, n int
	parts := strings.Split(spec, ",")
	addr = parts[0]
	fmt.Sscan(parts[1], &tos)
	fmt.Sscan(parts[2], &n)
	dst, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	// Unconnected, so ICMP errors from the far end do not fail sends.
	c, err := net.ListenUDP("udp4", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	raw.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TOS, tos) })
	if serr != nil {
		t.Fatal(serr)
	}
	for range n {
		if _, err := c.WriteToUDP(make([]byte, 200), dst); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRootLifecycle drives the built binary through attach, show,
// configure, stats and detach on a real veth pair.
func TestRootLifecycle(t *testing.T) {
	l := newLab(t)

	out := l.ok(t, "attach", "--rate", "100mbit", "--tc", "3:wred:min=50kb,max=1mb,p=0.1", "--tc", "2:name=video,step,k=30kb", "--dscp", "34=2")
	mustContain(t, "attach output", out,
		"port swp0 (netns "+l.sw+")  rate 100mbit  queue veth  attach tcx  shaping htb",
		"peer eth0 (netns "+l.rx+")",
		"dscp 26 -> tc3 (roce)", "dscp 34 -> tc2 (video)",
		"class tc3 (roce)     limit 2mb    ecn wred min 50kb max 1mb probability 0.1",
		"ecn step K 30kb", "strict")
	mustContain(t, "tc qdisc after attach", sh(t, "tc", "-n", l.sw, "qdisc", "show", "dev", "swp0"), "qdisc htb 1: root")

	// A second attach must fail and leave the first port alone.
	_, errOut, code := l.portctl(t, "attach", "--netns", l.sw, "--dev", "swp0", "--rate", "1gbit")
	if code != 1 || !strings.Contains(errOut, "already attached") {
		t.Errorf("second attach: exit %d, %q; want 1 and \"already attached\"", code, errOut)
	}

	show := l.ok(t, "show")
	if show != out {
		t.Errorf("show differs from what attach printed:\n%s\nattach:\n%s", show, out)
	}

	out = l.ok(t, "configure", "--tc", "3:min=100kb")
	mustContain(t, "configure output", out, "ecn wred min 100kb max 1mb probability 0.1")
	mustContain(t, "show after configure", l.ok(t, "show"), "class tc3 (roce)     limit 2mb    ecn wred min 100kb max 1mb probability 0.1")
	var sj showJSON
	if err := json.Unmarshal([]byte(l.ok(t, "show", "-j")), &sj); err != nil {
		t.Fatalf("show -j: %v", err)
	}
	if sj.Config.Classes[3].MinThBytes != 100*1024 || sj.Port.Attach != qdisc.AttachTCX || sj.Port.PeerNetns != l.rx {
		t.Errorf("show -j: %+v", sj)
	}
	// The machine's xmit dispatcher holds the port's slot.
	if sj.Port.XmitDispatched {
		var ds dispatch.Status
		out, errOut, code := l.portctl(t, "dispatcher", "-j")
		if err := json.Unmarshal([]byte(out), &ds); code != 0 || err != nil || !ds.Attached || ds.Ports < 1 || ds.ProgramID == 0 {
			t.Errorf("dispatcher -j with a dispatched port: exit %d, %v, %+v %s", code, err, ds, errOut)
		}
		t.Logf("dispatcher: %+v", ds)
		out, _, _ = l.portctl(t, "dispatcher")
		mustContain(t, "dispatcher", out, "xmit dispatcher: program ", "slots: ")
	}
	// A two-threshold class (seed 001) goes through the maps and back.
	out = l.ok(t, "configure", "--tc", "2:2t:t1=10kb,t2=20kb,p1=0.5,t2-max=40kb,p2=0.2")
	want2t := "ecn two-threshold t1 10kb t2 20kb light_probability 0.5 t2_max 40kb heavy_probability 0.2"
	mustContain(t, "configure 2t output", out, want2t)
	mustContain(t, "show after configure 2t", l.ok(t, "show"), want2t)
	var sj2 showJSON
	if err := json.Unmarshal([]byte(l.ok(t, "show", "-j")), &sj2); err != nil {
		t.Fatalf("show -j: %v", err)
	}
	if tt := sj2.Config.Classes[2].TwoThreshold; sj2.Config.Classes[2].ECN != qdisc.ECNTwoThreshold || tt.T1Bytes != 10*1024 || tt.T2MaxBytes != 40*1024 || math.Abs(tt.HeavyMaxP-0.2) > 1e-9 {
		t.Errorf("show -j class 2: %+v", sj2.Config.Classes[2])
	}
	if _, errOut, code := l.portctl(t, "configure", "--netns", l.sw, "--dev", "swp0", "--tc", "2:t1=20kb"); code != 2 ||
		!strings.Contains(errOut, "two-threshold: t2 (20kb) must be greater than t1 (20kb)") {
		t.Errorf("configure t1 = t2: exit %d, %q", code, errOut)
	}
	if _, errOut, code := l.portctl(t, "configure", "--netns", l.sw, "--dev", "swp0", "--default-class", "2"); code != 2 || !strings.Contains(errOut, "cannot change live") {
		t.Errorf("configure --default-class on a shaped port: exit %d, %q", code, errOut)
	}

	// RoCE-marked traffic (DSCP 26, ECT(0)) lands in tc3.
	l.send(t, 26<<2|2, 20)
	time.Sleep(200 * time.Millisecond)
	var st statsJSON
	if err := json.Unmarshal([]byte(l.ok(t, "stats", "-j")), &st); err != nil {
		t.Fatalf("stats -j: %v", err)
	}
	roce := st.Classes[3]
	if roce.EnqueuedPackets < 20 || roce.ArrivedECT0 < 20 || roce.DequeuedPackets < 20 {
		t.Errorf("tc3 after 20 DSCP 26 ECT(0) packets: %+v", roce)
	}
	if err := roce.CheckInvariant(); err != nil {
		t.Error(err)
	}
	if st.Qdisc == nil || st.Qdisc.Kind != "htb" || st.Qdisc.SentPackets < 20 {
		t.Errorf("stats -j qdisc: %+v", st.Qdisc)
	}
	mustContain(t, "stats", l.ok(t, "stats"), "class tc3 (roce)\n Sent ", "port counters: ipv4 ", "qdisc htb root: Sent ")
	watch := l.ok(t, "stats", "--watch", "50ms", "--count", "2")
	if n := strings.Count(watch, " total "); n != 2 {
		t.Errorf("--watch 50ms --count 2 printed %d reports:\n%s", n, watch)
	}

	if out := l.ok(t, "detach"); !strings.Contains(out, "detached swp0") {
		t.Errorf("detach printed %q", out)
	}
	l.checkDetached(t)

	t.Run("legacy", func(t *testing.T) {
		out := l.ok(t, "attach", "--rate", "1gbit", "--legacy")
		mustContain(t, "attach --legacy", out, "attach legacy")
		mustContain(t, "tc qdisc on swp0", sh(t, "tc", "-n", l.sw, "qdisc", "show", "dev", "swp0"), "clsact", "htb")
		mustContain(t, "tc qdisc on eth0", sh(t, "tc", "-n", l.rx, "qdisc", "show", "dev", "eth0"), "clsact")
		l.send(t, 26<<2|2, 5)
		time.Sleep(100 * time.Millisecond)
		mustContain(t, "stats", l.ok(t, "stats"), "class tc3 (roce)")
		l.ok(t, "detach")
		l.checkDetached(t)
	})

	t.Run("virtual", func(t *testing.T) {
		out := l.ok(t, "attach", "--rate", "1gbit", "--mode", "virtual", "--tc", "0:step:k=64kb,rate=500mbit")
		mustContain(t, "attach --mode virtual", out, "queue virtual", "shaping none", "ecn step K 64kb", "rate 500mbit")
		if strings.Contains(out, "peer ") {
			t.Errorf("virtual port shows a peer:\n%s", out)
		}
		l.ok(t, "detach")
		l.checkDetached(t)
	})
}

// TestRootSweep: a port whose device is deleted under it is left pinned
// (portctl exited long ago); portctl sweep removes its pins and record and
// leaves a live port alone.
func TestRootSweep(t *testing.T) {
	l := newLab(t)
	l.ok(t, "attach", "--rate", "100mbit")
	dir := filepath.Join(qdisc.PinRoot, l.pinPrefix(t)+"swp0")
	if out, errOut, code := l.portctl(t, "sweep"); code != 0 || strings.Contains(out, dir) {
		t.Fatalf("sweep with the port on its device: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("sweep removed a live port: %v", err)
	}
	sh(t, "ip", "-n", l.sw, "link", "del", "swp0")
	out, errOut, code := l.portctl(t, "sweep")
	if code != 0 || !strings.Contains(out, "swept port "+dir+"\n") {
		t.Fatalf("sweep after the device went: exit %d\n%s%s", code, out, errOut)
	}
	for _, gone := range []string{dir, filepath.Join(qdisc.MetaRoot, filepath.Base(dir)+".json")} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("%s is left after sweep (%v)", gone, err)
		}
	}
	if out, _, _ := l.portctl(t, "sweep"); strings.Contains(out, dir) {
		t.Errorf("a second sweep found it again:\n%s", out)
	}
}

// TestRootConfigureFromSONiC: configure --from sonic takes a SONiC
// config_db.json's port onto a live port whole (rate, DSCP map, WRED, PFC
// no-drop as PPFC), traffic lands in the file's classes, and a file with
// one bad field changes nothing.
func TestRootConfigureFromSONiC(t *testing.T) {
	l := newLab(t)
	l.ok(t, "attach", "--rate", "100mbit")

	// The switch's file: what show --as sonic writes for another port,
	// less portctl's own FABRICLAB table (a switch's file has none).
	text, errOut, code := l.portctl(t, "show", "--rate", "200mbit", "--tc", "3:wred:min=80kb,max=400kb,p=0.05,xoff=600kb,xon=300kb",
		"--dscp", "34=2", "--as", "sonic", "--interface", "Ethernet8")
	if code != 0 {
		t.Fatalf("show --as sonic: exit %d: %s", code, errOut)
	}
	var db map[string]any
	if err := json.Unmarshal([]byte(text), &db); err != nil {
		t.Fatal(err)
	}
	delete(db, "FABRICLAB")
	good := filepath.Join(t.TempDir(), "config_db.json")
	writeJSON(t, good, db)

	before := l.ok(t, "show", "-j")
	out := l.ok(t, "configure", "--from", "sonic", "--file", good)
	mustContain(t, "configure --from sonic", out, "rate 200mbit", "dscp 34 -> tc2",
		"class tc3 (roce)", "ecn wred min 80kb max 400kb probability 0.05", "xoff 600kb xon 300kb")
	var sj showJSON
	if err := json.Unmarshal([]byte(l.ok(t, "show", "-j")), &sj); err != nil {
		t.Fatalf("show -j: %v", err)
	}
	c3 := sj.Config.Classes[3]
	if sj.Config.Rate != 200*units.Mbit || sj.Config.DSCPClass[34] != 2 || sj.Config.DSCPClass[26] != 3 ||
		c3.ECN != qdisc.ECNWRED || c3.MinThBytes != 80*units.KiB || c3.MaxThBytes != 400*units.KiB ||
		math.Abs(c3.MaxP-0.05) > 1e-9 || c3.XoffBytes != 600*units.KiB || c3.XonBytes != 300*units.KiB {
		t.Errorf("show -j after configure --from sonic: rate %v, dscp 34 -> %d, class 3 %+v", sj.Config.Rate, sj.Config.DSCPClass[34], c3)
	}
	if before == l.ok(t, "show", "-j") {
		t.Error("configure --from sonic changed nothing")
	}
	// The kernel's HTB holds the new rate: the port is shaped to it.
	mustContain(t, "tc class on swp0", sh(t, "tc", "-n", l.sw, "class", "show", "dev", "swp0"), "rate 200Mbit")

	// Traffic follows the file's DSCP map.
	l.send(t, 34<<2|2, 15)
	l.send(t, 26<<2|2, 10)
	time.Sleep(200 * time.Millisecond)
	var st statsJSON
	if err := json.Unmarshal([]byte(l.ok(t, "stats", "-j")), &st); err != nil {
		t.Fatalf("stats -j: %v", err)
	}
	if c2, c3 := st.Classes[2], st.Classes[3]; c2.EnqueuedPackets < 15 || c3.EnqueuedPackets < 10 {
		t.Errorf("after 15 DSCP 34 and 10 DSCP 26 packets: tc2 enqueued %d, tc3 %d", c2.EnqueuedPackets, c3.EnqueuedPackets)
	}

	// One bad field: refused with its JSON path, the port untouched.
	applied := l.ok(t, "show", "-j")
	wred := db["WRED_PROFILE"].(map[string]any)["Ethernet8_q3"].(map[string]any)
	for _, colour := range []string{"green", "yellow", "red"} {
		wred[colour+"_drop_probability"] = "150"
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	writeJSON(t, bad, db)
	_, errOut, code = l.portctl(t, "configure", "--netns", l.sw, "--dev", "swp0", "--from", "sonic", "--file", bad)
	if code == 0 || !strings.Contains(errOut, "/WRED_PROFILE/Ethernet8_q3/green_drop_probability") || !strings.Contains(errOut, "150") {
		t.Errorf("configure from a file with drop probability 150: exit %d, %q; want the field's path and value", code, errOut)
	}
	t.Logf("refused: %s", strings.TrimSpace(errOut))
	if now := l.ok(t, "show", "-j"); now != applied {
		t.Errorf("a refused file changed the port:\nbefore %s\nafter %s", applied, now)
	}

	l.ok(t, "detach")
	l.checkDetached(t)
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
