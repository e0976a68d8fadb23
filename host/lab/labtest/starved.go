//go:build linux

package labtest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/host/hostlost"
)

// StarvedAttempts is how many runs a host-sensitive check gets while the
// host starves them.
const StarvedAttempts = 3

// Checks collects the checks of one run that a starving host can break:
// rates, FCT against the ideal, late reactions. Checks that no host can
// break (bytes delivered, packets lost) go to the test itself.
type Checks struct {
	failed []string
}

// Errorf records a failed check.
func (c *Checks) Errorf(format string, args ...any) {
	c.failed = append(c.failed, fmt.Sprintf(format, args...))
}

// Failed reports whether a check failed.
func (c *Checks) Failed() bool { return len(c.failed) > 0 }

// RetryStarved runs run; if its host-sensitive checks failed and the
// run's report says the host starved it (hostlost's budget), it runs
// again, up to StarvedAttempts runs. Never silently: every failed run's
// checks and host figure are logged. A run the host did not starve, or
// whose host-lost time was not measured (a nil report), judges the
// checks. If every run was host-starved the checks cannot tell the fabric
// from the host here: they are logged as HOST-DISTORTED, each run's share
// beside them, and do not fail the test (a machine whose hypervisor
// steals a third of a run, seen in CI, gives nothing else).
func RetryStarved(tb testing.TB, run func(attempt int, c *Checks) *hostlost.Report) {
	tb.Helper()
	var shares []string
	for attempt := 1; ; attempt++ {
		c := &Checks{}
		r := run(attempt, c)
		if !c.Failed() {
			return
		}
		if r == nil || !r.HostStarved {
			share := "not measured"
			if r != nil {
				share = fmt.Sprintf("%.1f %% of the run", 100*r.Share)
			}
			for _, f := range c.failed {
				tb.Errorf("run %d: %s (host-lost %s)", attempt, f, share)
			}
			return
		}
		shares = append(shares, fmt.Sprintf("%.1f %%", 100*r.Share))
		if attempt < StarvedAttempts {
			tb.Logf("run %d failed: %s; the host starved it (%.1f %% of the run, budget %.1f %%): running once more",
				attempt, strings.Join(c.failed, "; "), 100*r.Share, 100*r.Budget)
			continue
		}
		tb.Logf("HOST-DISTORTED, not judged: %s; the host starved every one of %d runs (%s of each run, budget %.1f %%)",
			strings.Join(c.failed, "; "), attempt, strings.Join(shares, ", "), 100*r.Budget)
		return
	}
}
