package htsim

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeExec writes an executable file.
func writeExec(tb testing.TB, path, text string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		tb.Fatal(err)
	}
}

// fakeBuild is an htsim build tree whose htsim_uec replays the fixtures
// (recording its arguments, one run a line, in args.txt of its working
// directory) and whose parse_output prints the fixture log. With
// unfinished, htsim_uec prints its counters but no flow's finish.
func fakeBuild(tb testing.TB, unfinished bool) string {
	tb.Helper()
	td, err := filepath.Abs("testdata")
	if err != nil {
		tb.Fatal(err)
	}
	out := "cat " + td + "/incast4.out"
	if unfinished {
		out = "grep -v finished " + td + "/incast4.out"
	}
	build := filepath.Join(tb.TempDir(), "build")
	writeExec(tb, filepath.Join(build, "datacenter", "htsim_uec"),
		"#!/bin/sh\necho \"$@\" >> args.txt\ncp "+td+"/incast4.idmap idmap.txt\n"+out+"\n")
	writeExec(tb, filepath.Join(build, "parse_output"), "#!/bin/sh\ncat "+td+"/incast4.log\n")
	return build
}

func TestLocate(t *testing.T) {
	build := fakeBuild(t, false)
	want := Binaries{HtsimUEC: filepath.Join(build, "datacenter", "htsim_uec"), ParseOutput: filepath.Join(build, "parse_output")}
	// htsim's source tree links sim/datacenter/htsim_uec to the build.
	sim := t.TempDir()
	if err := os.MkdirAll(filepath.Join(sim, "datacenter"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(want.HtsimUEC, filepath.Join(sim, "datacenter", "htsim_uec")); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{build, filepath.Join(build, "datacenter"), filepath.Join(sim, "datacenter")} {
		b, err := Locate(dir)
		if err != nil || b.ParseOutput != want.ParseOutput || filepath.Base(b.HtsimUEC) != "htsim_uec" {
			t.Errorf("Locate(%s) = %+v, %v; want %+v", dir, b, err, want)
		}
	}
}

func TestLocateSaysWhatIsMissing(t *testing.T) {
	empty := t.TempDir()
	noParse := t.TempDir()
	writeExec(t, filepath.Join(noParse, "htsim_uec"), "#!/bin/sh\n")
	notExec := t.TempDir()
	if err := os.WriteFile(filepath.Join(notExec, "htsim_uec"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ dir, name, says string }{
		{"", "htsim_uec", "no directory to look for htsim_uec in (the project names htsim's build directory in $HTSIM)"},
		{empty, "htsim_uec", "no executable htsim_uec in " + filepath.Join(empty, "htsim_uec") + ", "},
		{notExec, "htsim_uec", "no executable htsim_uec"},
		{noParse, "parse_output", "no executable parse_output in "},
	} {
		_, err := Locate(tc.dir)
		var me *MissingBinaryError
		if !errors.As(err, &me) || me.Name != tc.name || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Locate(%q) = %v: want a *MissingBinaryError for %s saying %q", tc.dir, err, tc.name, tc.says)
		}
	}
	// Run says it before it does anything else.
	if _, err := (Runner{Dir: empty}).Run(context.Background(), fixtureScenario()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Run without htsim = %v", err)
	}
}

func TestRunWithAFakeBuild(t *testing.T) {
	work := t.TempDir()
	r, err := Runner{Dir: fakeBuild(t, false), WorkDir: work}.Run(context.Background(), fixtureScenario())
	if err != nil {
		t.Fatal(err)
	}
	if r.TailFCT != 19_374_667 || len(r.Flows) != 4 || r.Counters.NACKs != 64 || r.Queue.Samples != 1136 {
		t.Errorf("result: tail %v, %d flows, %d NACKs, %d queue samples; want the fixtures' 19.374667ms, 4, 64, 1136", r.TailFCT, len(r.Flows), r.Counters.NACKs, r.Queue.Samples)
	}
	cm, err := os.ReadFile(filepath.Join(work, "htsim.cm"))
	if err != nil || string(cm) != r.Plan.ConnectionMatrix() {
		t.Errorf("htsim.cm = %q, %v", cm, err)
	}
	args, err := os.ReadFile(filepath.Join(work, "args.txt"))
	if want := strings.Join(r.Plan.args("htsim.cm", "htsim.log", r.Plan.EndPs), " ") + "\n"; err != nil || string(args) != want {
		t.Errorf("htsim_uec ran with\n%s\nwant\n%s", args, want)
	}
}

func TestRunReportsUnfinishedFlows(t *testing.T) {
	work := t.TempDir()
	p := mustPlan(t, fixtureScenario())
	_, err := Runner{Dir: fakeBuild(t, true), WorkDir: work}.Run(context.Background(), fixtureScenario())
	var ie *IncompleteError
	if !errors.As(err, &ie) || ie.Finished != 0 || ie.Senders != 4 || ie.EndPs != 8*p.EndPs {
		t.Errorf("Run = %v: want an *IncompleteError of 0 of 4 at 8 × %d ps", err, p.EndPs)
	}
	// Once at the planned end, once 8 times as long.
	args, _ := os.ReadFile(filepath.Join(work, "args.txt"))
	if runs := strings.Count(string(args), "\n"); runs != 2 {
		t.Errorf("htsim_uec ran %d times, want 2", runs)
	}
}

// TestHtsim runs the real htsim of $HTSIM: its own 15 → 1 to the digit of
// its validation outputs (proof of the build and of this package's
// flags), and the lab's trimming 8 → 1 at 500 Mbit/s, scaled, seed 1,
// within htsim.md's 5-seed range.
func TestHtsim(t *testing.T) {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		t.Skipf("needs htsim: set $%s to its build directory (docs/htsim.md)", EnvDir)
	}
	rn := Runner{Dir: dir}
	ctx := context.Background()
	t.Run("incast.cm", func(t *testing.T) {
		r, err := rn.Run(ctx, incastCM())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("tail %v (%.3f × ideal), %d NACKs, in %v", r.TailFCT, r.TailOverIdeal, r.Counters.NACKs, r.Wall)
		// validate_uec_sender.out: tail 2478.53 µs, 811 NACKs.
		if d := r.TailFCT - 2_478_530*time.Nanosecond; d < -5 || d > 5 || r.Counters.NACKs != 811 {
			t.Errorf("tail %v, %d NACKs; want htsim's 2478.53µs, 811", r.TailFCT, r.Counters.NACKs)
		}
	})
	t.Run("lab trim 8", func(t *testing.T) {
		r, err := rn.Run(ctx, labTrim(8, 500_000_000, Scaled))
		if err != nil {
			t.Fatal(err)
		}
		q := r.Queue
		t.Logf("tail %.3f, mean %.3f × ideal; queue p50 %.2f p99 %.2f max %.2f BDP; %d NACKs; in %v",
			r.TailOverIdeal, r.MeanOverIdeal, q.P50BDPs, q.P99BDPs, q.MaxBDPs, r.Counters.NACKs, r.Wall)
		// htsim.md, NSCC, seeds 1–5: tail 1.010–1.015, mean 0.88–0.94,
		// p50 0.85 BDP, 159–166 trims.
		if r.TailOverIdeal < 1.010 || r.TailOverIdeal > 1.015 || r.MeanOverIdeal < 0.88 || r.MeanOverIdeal > 0.94 ||
			q.P50BDPs < 0.84 || q.P50BDPs > 0.86 || r.Counters.NACKs < 159 || r.Counters.NACKs > 166 {
			t.Errorf("outside htsim.md's row")
		}
	})
}
