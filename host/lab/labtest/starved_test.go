//go:build linux

package labtest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/host/hostlost"
)

// judge records what RetryStarved logs and fails.
type judge struct {
	testing.TB
	logs, errs []string
}

func (j *judge) Helper() {}
func (j *judge) Logf(format string, args ...any) {
	j.logs = append(j.logs, fmt.Sprintf(format, args...))
}
func (j *judge) Errorf(format string, args ...any) {
	j.errs = append(j.errs, fmt.Sprintf(format, args...))
}

// TestRetryStarved: a run the host did not starve judges; a starved run
// that failed runs again, up to StarvedAttempts; every run starved is
// logged as host-distorted with each share, not failed.
func TestRetryStarved(t *testing.T) {
	starved := &hostlost.Report{Share: 0.105, Budget: 0.02, HostStarved: true}
	quiet := &hostlost.Report{Share: 0.01, Budget: 0.02}
	for _, tc := range []struct {
		name    string
		reports []*hostlost.Report // per run
		fail    []bool             // per run: a check failed
		runs    int
		errs    int
		logs    string // in the last log line
	}{
		{"pass at once", []*hostlost.Report{quiet}, []bool{false}, 1, 0, ""},
		{"quiet failure judged", []*hostlost.Report{quiet}, []bool{true}, 1, 1, ""},
		{"unmeasured failure judged", []*hostlost.Report{nil}, []bool{true}, 1, 1, ""},
		{"starved then pass", []*hostlost.Report{starved, quiet}, []bool{true, false}, 2, 0, "running once more"},
		{"starved then quiet failure", []*hostlost.Report{starved, quiet}, []bool{true, true}, 2, 1, "running once more"},
		{"starved every run", []*hostlost.Report{starved, starved, starved}, []bool{true, true, true}, 3, 0, "HOST-DISTORTED, not judged: tail over; the host starved every one of 3 runs (10.5 %, 10.5 %, 10.5 % of each run"},
	} {
		j := &judge{TB: t}
		runs := 0
		RetryStarved(j, func(attempt int, c *Checks) *hostlost.Report {
			runs++
			if attempt != runs {
				t.Errorf("%s: attempt %d on run %d", tc.name, attempt, runs)
			}
			if tc.fail[attempt-1] {
				c.Errorf("tail over")
			}
			return tc.reports[attempt-1]
		})
		last := ""
		if len(j.logs) > 0 {
			last = j.logs[len(j.logs)-1]
		}
		if runs != tc.runs || len(j.errs) != tc.errs || !strings.Contains(last, tc.logs) {
			t.Errorf("%s: %d runs, errors %q, logs %q; want %d runs, %d errors, a log with %q", tc.name, runs, j.errs, j.logs, tc.runs, tc.errs, tc.logs)
		}
	}
}
