package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/aqm"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

const tuneHelp = `Usage: portctl tune --rate RATE --rtt-p50 DUR --rtt-p90 DUR [--rtt-avg DUR]
                    [--lambda L] [--class N] [-j]

Derive ECN marking thresholds from the port rate and the RTTs of the flows
through it (ECN♯ rule of thumb, seed 002 §3.4: K = λ·C·RTT, T = λ·RTT), and
print them with ready-to-paste --tc options for ECN♯, TCN, CoDel and step
marking (step-Tail: K from RTT p90; step-AVG: K from the mean RTT). Needs no
device and no privileges.

Options:
  --rate RATE      port speed, e.g. 10gbit (required)
  --rtt-p50 DUR    median base RTT, e.g. 80us (required)
  --rtt-p90 DUR    90th-percentile base RTT, e.g. 200us (required)
  --rtt-avg DUR    mean RTT (default: --rtt-p50)
  --lambda L       λ of the transport: 1 classic ECN TCP (default), 0.17 DCTCP
  --class N        traffic class for the --tc lines (default 3)
  -j               JSON

Durations as in tc: 200us, 1.5ms (a bare number is µs).

Example (seed 002's testbed):
  portctl tune --rate 10gbit --rtt-p50 80us --rtt-p90 200us --rtt-avg 85us
`

func cmdTune(args []string, stdout, stderr io.Writer) int {
	var (
		rate, p50, p90, avg, class string
		lambda                     float64
		js                         bool
	)
	fs := newFlagSet("tune")
	fs.StringVar(&rate, "rate", "", "")
	fs.StringVar(&p50, "rtt-p50", "", "")
	fs.StringVar(&p90, "rtt-p90", "", "")
	fs.StringVar(&avg, "rtt-avg", "", "")
	fs.Float64Var(&lambda, "lambda", 1, "")
	fs.StringVar(&class, "class", "3", "")
	jsonFlag(fs, &js)
	err := func() error {
		if done, err := parseCommand(fs, tuneHelp, args, stdout, "options are --name value, e.g. --rate 10gbit"); done || err != nil {
			return err
		}
		for _, req := range []struct{ val, flag, eg string }{
			{rate, "--rate", "the port speed, e.g. --rate 10gbit"},
			{p50, "--rtt-p50", "the median RTT, e.g. --rtt-p50 80us"},
			{p90, "--rtt-p90", "the 90th-percentile RTT, e.g. --rtt-p90 200us"},
		} {
			if req.val == "" {
				return usagef("%s is required (%s)", req.flag, req.eg)
			}
		}
		in := aqm.TuneInput{Lambda: lambda}
		var err error
		if in.Rate, err = parseRateFlag(rate); err != nil {
			return err
		}
		for _, d := range []struct {
			dst  *time.Duration
			val  string
			flag string
		}{{&in.RTTp50, p50, "--rtt-p50"}, {&in.RTTp90, p90, "--rtt-p90"}, {&in.RTTAvg, avg, "--rtt-avg"}} {
			if d.val == "" {
				continue
			}
			if *d.dst, err = units.ParseDuration(d.val); err != nil {
				return usagef("%s %s: %v", d.flag, d.val, err)
			}
		}
		cl, err := qdisc.ParseClass(class)
		if err != nil {
			return usagef("--class %s: %v", class, err)
		}
		out, err := aqm.Tune(in)
		if err != nil {
			return usageError{err}
		}
		if js {
			return printTuneJSON(stdout, in, cl, out)
		}
		renderTune(stdout, in, cl, out)
		return nil
	}()
	return report(stderr, "tune", err)
}

// tuneOptions returns the --tc options for the derived values, each with an
// optional comment: every mode's tune rule (qdisc.TuneOptions).
func tuneOptions(cl qdisc.ClassID, out aqm.TuneOutput) [][2]string {
	var opts [][2]string
	for _, o := range qdisc.TuneOptions(out) {
		opts = append(opts, [2]string{fmt.Sprintf("--tc %d:%s", cl, o.Spec), o.Comment})
	}
	return opts
}

func renderTune(w io.Writer, in aqm.TuneInput, cl qdisc.ClassID, out aqm.TuneOutput) {
	fd := units.FormatDuration
	avg := fd(out.RTTAvg)
	if in.RTTAvg == 0 {
		avg += " (= p50)"
	}
	fmt.Fprintf(w, "rate %s  RTT p50 %s  p90 %s  avg %s  λ %s  (seed 002 §3.4)\n\n",
		in.Rate, fd(in.RTTp50), fd(in.RTTp90), avg, strconv.FormatFloat(in.Lambda, 'g', -1, 64))
	rows := [][3]string{
		{"ins_target", fd(out.InsTarget), "λ·RTT_p90 (eq. 2)"},
		{"pst_target", fd(out.PstTarget), "λ·RTT_avg (lower bound: pst_target ≥ λ·RTT_avg)"},
		{"pst_interval", fd(out.PstInterval), "≈ RTT_p90"},
		{"tcn threshold", fd(out.TCNThreshold), "= ins_target"},
		{"codel target", fd(out.CoDelTarget), "= pst_target"},
		{"codel interval", fd(out.CoDelInterval), "= RTT_p90"},
		{"K_tail", out.KTailBytes.String(), "λ·C·RTT_p90 (eq. 1), step-Tail"},
		{"K_avg", out.KAvgBytes.String(), "λ·C·RTT_avg (eq. 1), step-AVG"},
	}
	for _, r := range rows {
		fmt.Fprintf(w, "  %-15s %-10s %s\n", r[0], r[1], r[2])
	}
	if len(out.Notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range out.Notes {
			fmt.Fprint(w, wrap("note: "+n, 78, "      "))
		}
	}
	fmt.Fprintf(w, "\nOptions for portctl attach/configure (class %d):\n", cl)
	opts := tuneOptions(cl, out)
	width := 0 // align the comments among the lines that have one
	for _, o := range opts {
		if o[1] != "" {
			width = max(width, len(o[0]))
		}
	}
	for _, o := range opts {
		if o[1] == "" {
			fmt.Fprintln(w, o[0])
			continue
		}
		fmt.Fprintf(w, "%-*s  # %s\n", width, o[0], o[1])
	}
}

// wrap breaks s at spaces into lines of at most width columns (a longer
// word stays whole), indenting continuation lines.
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(s) {
		n := utf8.RuneCountInString(word)
		switch {
		case i == 0:
		case line+1+n > width:
			b.WriteString("\n" + indent)
			line = utf8.RuneCountInString(indent)
		default:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(word)
		line += n
	}
	b.WriteByte('\n')
	return b.String()
}

// tuneJSON is portctl tune -j: the input, the derived values and the
// options.
type tuneJSON struct {
	Input struct {
		Rate   units.Rate    `json:"rate"`
		RTTp50 time.Duration `json:"rtt_p50_ns"`
		RTTp90 time.Duration `json:"rtt_p90_ns"`
		RTTAvg time.Duration `json:"rtt_avg_ns,omitempty"`
		Lambda float64       `json:"lambda"`
	} `json:"input"`
	Class   qdisc.ClassID  `json:"class"`
	Derived aqm.TuneOutput `json:"derived"`
	Options []string       `json:"options"`
}

func printTuneJSON(w io.Writer, in aqm.TuneInput, cl qdisc.ClassID, out aqm.TuneOutput) error {
	var j tuneJSON
	j.Input.Rate, j.Input.RTTp50, j.Input.RTTp90, j.Input.RTTAvg, j.Input.Lambda = in.Rate, in.RTTp50, in.RTTp90, in.RTTAvg, in.Lambda
	j.Class, j.Derived = cl, out
	for _, o := range tuneOptions(cl, out) {
		j.Options = append(j.Options, o[0])
	}
	return printJSON(w, j)
}
