//go:build linux

package dctcp

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/fabriclab/fabriclab/host/lab/labtest"
)

// structOpsNeeds is what Register needs: BPF TCP congestion controls
// registered through a link (kernel 6.4).
const structOpsNeeds = structOpsKernel

// testName is a congestion-control name unique to this run.
func testName(t *testing.T) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "dctcp_" + hex.EncodeToString(b[:])
}

// waitGone waits until name is no longer a registered congestion control:
// the kernel unregisters a struct_ops link's map when its last file
// descriptor closes.
func waitGone(t *testing.T, name string) {
	t.Helper()
	for range 100 {
		if !slices.Contains(Available(), name) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("%s is still registered 2 s later: %v", name, Available())
}

// structOpsMaps counts the struct_ops maps loaded now whose name starts
// with prefix (cilium/ebpf names the map after the C variable: "dctcp").
func structOpsMaps(t *testing.T, prefix string) int {
	t.Helper()
	n := 0
	var id ebpf.MapID
	for {
		next, err := ebpf.MapGetNextID(id)
		if err != nil {
			return n
		}
		id = next
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue // gone meanwhile
		}
		if info, err := m.Info(); err == nil && info.Type == ebpf.StructOpsMap && strings.HasPrefix(info.Name, prefix) {
			n++
		}
		m.Close()
	}
}

// TestRegisterUnregister: the name appears in the kernel's list while the
// registration lives, a second registration under it fails by name, and
// Close removes it and frees the program.
func TestRegisterUnregister(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, structOpsNeeds)
	before := structOpsMaps(t, "dctcp")
	name := testName(t)
	r, err := Register(Options{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !slices.Contains(Available(), name) {
		t.Fatalf("%s not in tcp_available_congestion_control: %v", name, Available())
	}
	if _, err := Register(Options{Name: name}); err == nil || !strings.Contains(err.Error(), "registered already") {
		t.Errorf("a second Register(%q): %v, want an error naming it taken", name, err)
	}
	c, err := r.Counters()
	if err != nil || c != (Counters{}) {
		t.Errorf("counters before any socket: %+v, %v", c, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	waitGone(t, name)
	for range 50 {
		if structOpsMaps(t, "dctcp") == before {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("%d struct_ops maps named dctcp* left, %d before", structOpsMaps(t, "dctcp"), before)
}

// TestUnregisterOnKill: a process that registered and is killed (SIGKILL,
// no deferred Close) leaves nothing registered: the kernel drops the link
// with the process's file descriptors.
func TestUnregisterOnKill(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, structOpsNeeds)
	name := testName(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "DCTCP_TEST_CHILD="+name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "registered ") {
				ready <- sc.Text()
				return
			}
		}
		close(ready)
	}()
	select {
	case line, ok := <-ready:
		if !ok {
			t.Fatal("the child ended without registering")
		}
		t.Log("child: " + line)
	case <-time.After(10 * time.Second):
		t.Fatal("the child did not register within 10 s")
	}
	if !slices.Contains(Available(), name) {
		t.Fatalf("%s not registered while the child lives: %v", name, Available())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitGone(t, name)
}

// TestMain runs TestUnregisterOnKill's child when DCTCP_TEST_CHILD names
// a congestion control: it registers it and waits to be killed.
func TestMain(m *testing.M) {
	if name := os.Getenv("DCTCP_TEST_CHILD"); name != "" {
		r, err := Register(Options{Name: name})
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		defer r.Close()
		os.Stdout.WriteString("registered " + name + "\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestRegisterBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Name: "a_name_too_long_x"}, "at most 15"},
		{Options{Name: "Bad Name"}, "only a-z, 0-9"},
		{Options{Name: "fine", Params: &Params{ShiftG: 12, AlphaOnInit: 1024}}, "dctcp_shift_g 12 out of range [0, 10]"},
		{Options{Name: "reno"}, `named "reno" is registered already`},
	} {
		if _, err := Register(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Register(%+v): %v, want %q", tc.opts, err, tc.want)
		}
	}
}
