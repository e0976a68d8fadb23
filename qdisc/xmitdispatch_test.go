package qdisc

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc/dispatch"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// xmitChildEnv, set, makes the test binary a process that attaches one
// port (unpinned) on $xmitChildEnv's "netns-path dev" and waits to be
// killed: the port of a process that died without closing it.
const xmitChildEnv = "FABRICLAB_XMIT_DISPATCH_CHILD"

func TestMain(m *testing.M) {
	if arg := os.Getenv(xmitChildEnv); arg != "" {
		os.Exit(xmitChild(arg))
	}
	os.Exit(m.Run())
}

func xmitChild(arg string) int {
	f := strings.Fields(arg)
	if len(f) != 2 {
		fmt.Fprintf(os.Stderr, "%s=%q: want \"netns-path dev\"\n", xmitChildEnv, arg)
		return 2
	}
	p, err := Attach(DefaultConfig(200*units.Mbit), AttachOptions{Dev: f[1], Netns: f[0], Departure: DepartXmit})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("attached dispatched=%v\n", p.Info().XmitDispatched)
	time.Sleep(30 * time.Second) // bounded: the parent kills it first
	p.Close()
	return 0
}

// vethUp adds the veth pair a-b in the current namespace, both up.
func vethUp(t *testing.T, a, b string) {
	t.Helper()
	for _, args := range [][]string{
		{"link", "add", a, "type", "veth", "peer", "name", b},
		{"link", "set", a, "up"}, {"link", "set", b, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
}

// sendFrames writes n RoCE-class UDP frames to dev through an AF_PACKET
// socket: down the device's qdisc, as a forwarded packet goes.
func sendFrames(t *testing.T, dev string, n int) {
	t.Helper()
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	frame := craft(t, pktSpec{dscp: 26, ecn: ect0, payload: 200})
	to := &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6}
	for range n {
		if err := unix.Sendto(fd, frame, 0, to); err != nil {
			t.Fatalf("send to %s: %v", dev, err)
		}
	}
}

// departures waits up to 2 s for want departures from the port, and
// returns those at the xmit hook (Host.EnteredPackets) and those the
// peer's hook counted late: the tracepoint does not reach BPF for a few
// packets on a busy machine (docs/port.md), whichever program is on it.
func departures(t *testing.T, p *Port, want uint64) (hook, late uint64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		s, err := p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		hook, late = s.Total().Host.EnteredPackets, s.Port.LateDeparturePackets
		if hook+late >= want || time.Now().After(deadline) {
			if late > 0 {
				t.Logf("port %s: %d departures at the xmit hook, %d late", p.Info().Dev, hook, late)
			}
			return hook, late
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkDepartures checks that the port counted want departures, at least
// 90 % of them at the xmit hook.
func checkDepartures(t *testing.T, p *Port, want uint64) {
	t.Helper()
	hook, late := departures(t, p, want)
	if hook+late != want || hook < want*9/10 {
		t.Errorf("port %s: %d departures at the xmit hook and %d late, want %d, at least 90 %% at the hook", p.Info().Dev, hook, late, want)
	}
}

// dropAtIngress puts a program that drops every packet at the head of
// dev's TCX ingress, ahead of the port's dequeue.
func dropAtIngress(t *testing.T, dev string) link.Link {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}}) // TC_ACT_SHOT
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifi.Index, Program: prog, Attach: ebpf.AttachTCXIngress, Anchor: link.Head()})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func hostDrops(t *testing.T, p *Port) uint64 {
	t.Helper()
	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s.Total().Host.DroppedPackets
}

// waitHostDrops waits up to 2 s for want host drops, and returns them.
func waitHostDrops(t *testing.T, p *Port, want uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		n := hostDrops(t, p)
		if n >= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func dispatchStatus(t *testing.T) dispatch.Status {
	t.Helper()
	st, err := dispatch.Read()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestXmitDispatcher: ports' xmit hooks share the machine's one dispatcher
// program; each port's departures reach its own port_xmit and no other;
// a port of a killed process leaves a slot the next attach frees; the
// last port out removes the dispatcher.
func TestXmitDispatcher(t *testing.T) {
	labtest.EnterNetns(t)
	// No IPv6: its neighbour discovery would add packets of its own.
	if out, err := exec.Command("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1").CombinedOutput(); err != nil {
		t.Fatalf("sysctl: %v %s", err, out)
	}
	before := dispatchStatus(t)
	cfg := DefaultConfig(200 * units.Mbit)
	var ports []*Port
	defer func() {
		for _, p := range ports {
			p.Close()
		}
	}()
	for i, own := range []bool{false, false, true} {
		a, b := fmt.Sprintf("xd%da", i), fmt.Sprintf("xd%db", i)
		vethUp(t, a, b)
		p, err := Attach(cfg, AttachOptions{Dev: a, Departure: DepartXmit, XmitOwnProgram: own})
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, p)
		if got := p.Info().XmitDispatched; got == own {
			t.Fatalf("port %s: dispatched %v with XmitOwnProgram %v", a, got, own)
		}
	}
	st := dispatchStatus(t)
	if !st.Attached || st.Ports != before.Ports+2 || st.Stale != before.Stale {
		t.Fatalf("dispatcher %+v after two dispatched ports (before %+v)", st, before)
	}
	// One program on the tracepoint for both dispatched ports.
	prog, err := ebpf.NewProgramFromID(st.ProgramID)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := prog.Info(); err != nil || info.Name != bpf.XmitDispatchProgXmitDispatch {
		t.Errorf("dispatcher program %v: %v", info, err)
	}
	prog.Close()

	// Each port counts its own departures and only those.
	sends := []int{0, 40, 25}
	for i, n := range sends {
		sendFrames(t, fmt.Sprintf("xd%da", i), n)
	}
	for i, p := range ports {
		checkDepartures(t, p, uint64(sends[i]))
	}

	// Packets the kernel drops after the xmit hook (here a program ahead
	// of the port's dequeue at the peer's ingress) are booked as host
	// drops: port_host_drop dispatched by the packet's device, or its own.
	// (A packet the hook missed is not in the host queue: no drop.)
	for i, n := range []int{0, 12, 7} {
		if n == 0 {
			continue
		}
		drops0 := hostDrops(t, ports[i])
		hook0, _ := departures(t, ports[i], 0)
		l := dropAtIngress(t, fmt.Sprintf("xd%db", i))
		sendFrames(t, fmt.Sprintf("xd%da", i), n)
		hook1, _ := departures(t, ports[i], hook0+uint64(n))
		got := waitHostDrops(t, ports[i], drops0+hook1-hook0)
		l.Close()
		if got-drops0 != hook1-hook0 || hook1-hook0 < uint64(n)*9/10 {
			t.Errorf("port xd%da: %d host drops of %d packets through the xmit hook (%d sent)", i, got-drops0, hook1-hook0, n)
		}
	}

	// A port whose process is killed keeps its slot until the next
	// process that attaches or detaches a port frees it.
	vethUp(t, "xd3a", "xd3b")
	nsPath := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), xmitChildEnv+"="+nsPath+" xd3a")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "attached dispatched=true\n" {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("child: %q %v", line, err)
	}
	if st := dispatchStatus(t); st.Ports != before.Ports+3 || st.Stale != before.Stale {
		t.Errorf("dispatcher %+v with the child's port (before %+v)", st, before)
	}
	child.Process.Signal(unix.SIGKILL)
	child.Wait()
	if st := dispatchStatus(t); st.Ports != before.Ports+3 || st.Stale != before.Stale+1 {
		t.Errorf("dispatcher %+v after the child was killed: want its slot stale", st)
	}
	// The next attach sweeps it.
	vethUp(t, "xd4a", "xd4b")
	p4, err := Attach(cfg, AttachOptions{Dev: "xd4a", Departure: DepartXmit})
	if err != nil {
		t.Fatal(err)
	}
	ports = append(ports, p4)
	if st := dispatchStatus(t); st.Ports != before.Ports+3 || st.Stale != before.Stale {
		t.Errorf("dispatcher %+v after the next attach: want the dead slot freed", st)
	}

	// Detaching frees the slot; the others keep counting.
	if err := ports[1].Close(); err != nil {
		t.Fatal(err)
	}
	if st := dispatchStatus(t); st.Ports != before.Ports+2 {
		t.Errorf("dispatcher %+v after a detach", st)
	}
	sendFrames(t, "xd0a", 30)
	sendFrames(t, "xd1a", 30) // no port any more
	checkDepartures(t, ports[0], 30)
	if st := dispatchStatus(t); st.EmptySlot != before.EmptySlot || st.DropEmptySlot != before.DropEmptySlot {
		t.Errorf("dispatcher ran %d empty slots, %d for drops", st.EmptySlot-before.EmptySlot, st.DropEmptySlot-before.DropEmptySlot)
	}
	for _, p := range ports {
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	st = dispatchStatus(t)
	if st.Ports != before.Ports {
		t.Errorf("dispatcher %+v after every port left (before %+v)", st, before)
	}
	if before.Ports == 0 {
		if st.Attached {
			t.Errorf("the dispatcher stayed with no port")
		}
		if _, err := os.Stat(dispatch.Dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind: %v", dispatch.Dir, err)
		}
	}
}

// TestXmitDispatcherUnavailable: where the dispatcher cannot be had (here
// its directory is not on a bpffs, as in a private mount namespace), a
// port's xmit hook runs as its own programs, and Info says why.
func TestXmitDispatcherUnavailable(t *testing.T) {
	labtest.EnterNetns(t)
	if out, err := exec.Command("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1").CombinedOutput(); err != nil {
		t.Fatalf("sysctl: %v %s", err, out)
	}
	defer func(dir string) { dispatch.Dir = dir }(dispatch.Dir)
	dispatch.Dir = t.TempDir() + "/not-bpffs"
	vethUp(t, "xu0a", "xu0b")
	p, err := Attach(DefaultConfig(200*units.Mbit), AttachOptions{Dev: "xu0a", Departure: DepartXmit})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	info := p.Info()
	if info.XmitDispatched || info.XmitDispatchNote == "" || info.Departure != DepartXmit {
		t.Fatalf("info %+v: want departures at xmit through its own programs, and why", info)
	}
	t.Logf("dispatcher note: %s", info.XmitDispatchNote)
	sendFrames(t, "xu0a", 20)
	checkDepartures(t, p, 20)
}
