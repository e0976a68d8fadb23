package cc

import (
	"fmt"
	"math"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// MaxWndCheck says why a window of maxWndBDPs BDPs (bdpBytes each: rate ×
// baseRTT) cannot hold one mtu-byte packet, naming the base RTT that
// would make it one; nil when it can. ctrl names the controller (nscc,
// rccc): UET's MaxWnd is 1.5 BDP (uet.md "NSCC", "RCCC").
func MaxWndCheck(ctrl string, maxWndBDPs, bdpBytes float64, rate units.Rate, baseRTT time.Duration, mtu int) error {
	w := math.Floor(maxWndBDPs * bdpBytes)
	if w >= float64(mtu) {
		return nil
	}
	// The fix: a base RTT (or a link rate) whose BDP holds a packet.
	need := float64(mtu) / maxWndBDPs // bytes of BDP
	rtt := time.Duration(math.Ceil(need*8/float64(rate)*1e6)) * time.Microsecond
	return fmt.Errorf("%s: max_wnd (%v BDP = %.0f B at %v and %v) must be at least mtu (%d B): "+
		"a base_rtt of at least %v at this link rate makes it one",
		ctrl, maxWndBDPs, w, rate, baseRTT, mtu, rtt)
}
