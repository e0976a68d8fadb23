package cc

import (
	"fmt"
	"math"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// BDPBytes is rate × rtt in bytes.
func BDPBytes(rate units.Rate, rtt time.Duration) float64 {
	return float64(rate) * float64(rtt) / 8e9
}

// MaxWndBytes is a window of maxWndBDPs BDPs of rate × baseRTT in whole
// bytes, at most MaxInt32 and never below one mtu, so that [mtu, MaxWnd]
// stays a range when a short sample lowers the base RTT.
func MaxWndBytes(maxWndBDPs float64, rate units.Rate, baseRTT time.Duration, mtu int) int {
	w := math.Floor(maxWndBDPs * BDPBytes(rate, baseRTT))
	if !(w < math.MaxInt32) {
		w = math.MaxInt32
	}
	return max(int(w), mtu)
}

// MaxWndCheck says why a window of maxWndBDPs BDPs (rate × baseRTT each)
// cannot hold one mtu-byte packet, naming the base RTT that would make it
// one; nil when it can. ctrl names the controller (nscc, rccc): UET's
// MaxWnd is 1.5 BDP (uet.md "NSCC", "RCCC").
func MaxWndCheck(ctrl string, maxWndBDPs float64, rate units.Rate, baseRTT time.Duration, mtu int) error {
	w := math.Floor(maxWndBDPs * BDPBytes(rate, baseRTT))
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
