package htsim

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// EnvDir names the environment variable that holds the project's htsim
// directory (Runner.Dir); programs read it, this package does not.
const EnvDir = "HTSIM"

// Binaries are the two programs of an htsim build a run needs.
type Binaries struct {
	HtsimUEC    string // build/datacenter/htsim_uec
	ParseOutput string // build/parse_output: turns the binary log into text
}

// MissingBinaryError says a program of htsim's build is not where Locate
// looked. It matches fs.ErrNotExist.
type MissingBinaryError struct {
	Name     string
	Searched []string
}

func (e *MissingBinaryError) Error() string {
	if len(e.Searched) == 0 {
		return fmt.Sprintf("htsim: no directory to look for %s in (the project names htsim's build directory in $%s)", e.Name, EnvDir)
	}
	return fmt.Sprintf("htsim: no executable %s in %s: build it (docs/htsim.md: cmake --build build --target htsim_uec parse_output) and give its build directory or the one holding htsim_uec",
		e.Name, strings.Join(e.Searched, ", "))
}

func (e *MissingBinaryError) Unwrap() error { return fs.ErrNotExist }

// Locate finds htsim_uec and parse_output from dir: htsim's build
// directory, the directory holding htsim_uec (build/datacenter, or
// sim/datacenter with its link) or htsim/sim.
func Locate(dir string) (Binaries, error) {
	var b Binaries
	var err error
	if b.HtsimUEC, err = locateUEC(dir); err != nil {
		return b, err
	}
	// parse_output is built beside datacenter/, in build/.
	real, err := filepath.EvalSymlinks(b.HtsimUEC)
	if err != nil {
		return b, err
	}
	built := filepath.Dir(filepath.Dir(real))
	po := []string{filepath.Join(built, "parse_output"), filepath.Join(dir, "parse_output"), filepath.Join(dir, "build", "parse_output")}
	for _, c := range po {
		if executable(c) {
			b.ParseOutput = c
			return b, nil
		}
	}
	return b, &MissingBinaryError{Name: "parse_output", Searched: po}
}

// locateUEC finds htsim_uec from dir as Locate does.
func locateUEC(dir string) (string, error) {
	if dir == "" {
		return "", &MissingBinaryError{Name: "htsim_uec"}
	}
	uec := []string{
		filepath.Join(dir, "htsim_uec"),
		filepath.Join(dir, "datacenter", "htsim_uec"),
		filepath.Join(dir, "build", "datacenter", "htsim_uec"),
	}
	for _, c := range uec {
		if executable(c) {
			return c, nil
		}
	}
	return "", &MissingBinaryError{Name: "htsim_uec", Searched: uec}
}

func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// IncompleteError says some flows had not finished when htsim stopped,
// even at 8 × Plan.EndPs.
type IncompleteError struct {
	Finished, Senders int
	EndPs             int64 // htsim's time
}

func (e *IncompleteError) Error() string {
	return fmt.Sprintf("htsim: %d of %d flows finished by %v of htsim's time", e.Finished, e.Senders, time.Duration(e.EndPs/1e3))
}

// Runner runs scenarios with one htsim build.
type Runner struct {
	// Dir is where htsim_uec is (see Locate).
	Dir string
	// WorkDir keeps a run's files: htsim.cm, htsim.out (its output),
	// htsim.log (its binary log), idmap.txt; one run at a time. Optional:
	// "" runs each in a temporary directory removed afterwards, so runs
	// may go in parallel.
	WorkDir string
}

// workDir is the run's directory: WorkDir, made if need be, or a
// temporary one that done removes.
func (r Runner) workDir() (dir string, done func(), err error) {
	if r.WorkDir != "" {
		return r.WorkDir, func() {}, os.MkdirAll(r.WorkDir, 0o755)
	}
	if dir, err = os.MkdirTemp("", "htsim-"); err != nil {
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// Run runs s in htsim and reads its result. Without a build at r.Dir the
// error is a *MissingBinaryError; a bad scenario's joins *FieldErrors.
func (r Runner) Run(ctx context.Context, s Scenario) (Result, error) {
	p, err := NewPlan(s)
	if err != nil {
		return Result{}, err
	}
	bin, err := Locate(r.Dir)
	if err != nil {
		return Result{}, err
	}
	work, done, err := r.workDir()
	if err != nil {
		return Result{}, err
	}
	defer done()
	const cm, out, log, idmap = "htsim.cm", "htsim.out", "htsim.log", "idmap.txt"
	if err := os.WriteFile(filepath.Join(work, cm), []byte(p.ConnectionMatrix()), 0o644); err != nil {
		return Result{}, err
	}

	start := time.Now()
	var o output
	err = untilFinished(&p.EndPs, func() (int, int, error) {
		// htsim writes idmap.txt in its working directory.
		stdout, err := runIn(ctx, work, out, bin.HtsimUEC, p.args(cm, log, p.EndPs)...)
		if err != nil {
			return 0, 0, err
		}
		if o, err = parseOutput(bytes.NewReader(stdout), p.Receiver); err != nil {
			return 0, 0, err
		}
		if !o.haveCounters {
			return 0, 0, fmt.Errorf("htsim: %s printed no counters (the last line, New: … Rtx: …): %s", bin.HtsimUEC, tail(stdout))
		}
		return len(o.finishedUs), s.Senders, nil
	})
	if err != nil {
		return Result{}, err
	}

	f, err := os.Open(filepath.Join(work, idmap))
	if err != nil {
		return Result{}, fmt.Errorf("htsim: %w", err)
	}
	m, err := parseIDMap(f, p.Receiver/p.HostsPerToR, p.Receiver)
	f.Close()
	if err != nil {
		return Result{}, err
	}

	cmd := exec.CommandContext(ctx, bin.ParseOutput, log, "-ascii")
	cmd.Dir = work
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return Result{}, err
	}
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("htsim: %s: %w", bin.ParseOutput, err)
	}
	lr, perr := parseLog(pipe, m)
	if perr != nil {
		_ = cmd.Process.Kill()
	}
	werr := cmd.Wait()
	switch {
	case perr != nil:
		return Result{}, perr
	case werr != nil:
		return Result{}, fmt.Errorf("htsim: %s %s -ascii: %w: %s", bin.ParseOutput, log, werr, tail(stderr.Bytes()))
	}
	res, err := p.result(o, lr)
	res.Wall = time.Since(start)
	return res, err
}

// untilFinished runs try, which runs htsim until *endPs and says how many
// of its flows finished, and runs it again 8 times as long if some did
// not: a flow stalled until an RTO past the planned end, and the same
// seed runs the same events. Still unfinished, the error is an
// *IncompleteError.
func untilFinished(endPs *int64, try func() (finished, flows int, err error)) error {
	for attempt := 0; ; attempt++ {
		n, flows, err := try()
		if err != nil || n == flows {
			return err
		}
		if attempt == 1 {
			return &IncompleteError{Finished: n, Senders: flows, EndPs: *endPs}
		}
		*endPs *= 8
	}
}

// runIn runs bin with args in dir and returns its standard output, kept
// in dir's file out too; a failure carries the tail of its output.
func runIn(ctx context.Context, dir, out, bin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	stdout, err := run(cmd)
	if werr := os.WriteFile(filepath.Join(dir, out), stdout, 0o644); werr != nil && err == nil {
		err = werr
	}
	return stdout, err
}

// run runs cmd and returns its standard output; a failure carries the
// tail of its output.
func run(cmd *exec.Cmd) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		// htsim_uec prints its complaints (and assertions) on either.
		said := tail(stderr.Bytes())
		if said == "" {
			said = tail(stdout.Bytes())
		}
		return stdout.Bytes(), fmt.Errorf("htsim: %s: %w: %s", filepath.Base(cmd.Path), err, said)
	}
	return stdout.Bytes(), nil
}

// tail is the last lines of a program's output, for an error.
func tail(b []byte) string {
	b = bytes.TrimSpace(b)
	const keep = 800
	if len(b) > keep {
		b = b[len(b)-keep:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}
