package dialect

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fabriclab/fabriclab/qdisc"
)

// eosMaxThreshold is the largest random-detect ecn threshold EOS takes, in
// its unit.
const eosMaxThreshold = 256000000

// eos renders the port as Arista EOS 4.30 configuration: the DSCP and
// traffic-class maps are global, the rest sits under the interface.
func (p *port) eos() (string, error) {
	cfg := p.cfg
	out := indented{step: "   "}
	line := out.line
	p.unusedNote()
	p.strictNote()

	// EOS serves the tx-queues above the highest round-robin one in
	// strict priority (no priority on a queue makes it and those below
	// round-robin).
	shared := p.sharedClasses()
	if len(shared) > 0 {
		top := shared[len(shared)-1]
		for _, i := range p.usedClasses() {
			if cfg.Classes[i].Strict && i < top {
				p.refuse(i, "strict", "true", fmt.Sprintf("EOS serves strict tx-queues above the round-robin ones: a strict class must be numbered above every non-strict one, and class %d is not strict", top))
			}
		}
	}
	if cfg.Rate%1000 != 0 {
		p.refuse(-1, "rate", cfg.Rate.String(), "must be whole kbps (shape rate)")
	}
	// allow non-ect is global: every marking class passes Not-ECT
	// packets (the lab's default) or none does.
	var passNotECT, dropNotECT []string
	for _, i := range p.usedClasses() {
		cc := &cfg.Classes[i]
		if cc.ECN == qdisc.ECNOff {
			continue
		}
		if cc.WREDDrop {
			dropNotECT = append(dropNotECT, strconv.Itoa(i))
		} else {
			passNotECT = append(passNotECT, strconv.Itoa(i))
		}
	}
	if len(passNotECT) > 0 && len(dropNotECT) > 0 {
		p.refuse(-1, "wred_drop", classList(dropNotECT),
			"EOS's qos random-detect ecn allow non-ect is global: it cannot pass Not-ECT packets for "+classList(passNotECT)+" and drop them on the curve for these")
	}
	if len(dropNotECT) > 0 {
		p.note("%s: Not-ECT packets dropped on the curve in the lab (wred-drop); EOS without allow non-ect drops them where it would mark, per platform", classList(dropNotECT))
	}

	for _, i := range p.usedClasses() {
		if ds := p.dscps[i]; len(ds) > 0 {
			var s []string
			for _, d := range ds {
				s = append(s, strconv.Itoa(d))
			}
			line(0, "qos map dscp %s to traffic-class %d", strings.Join(s, " "), i)
		}
	}
	for _, i := range p.usedClasses() {
		line(0, "qos map traffic-class %d to tx-queue %d", i, i)
	}
	if len(passNotECT) > 0 {
		line(0, "qos random-detect ecn allow non-ect")
		p.note("qos random-detect ecn allow non-ect: some platforms take it as allow non-ect chip-based (Arista's AVD: check which the platform needs)")
	}
	line(0, "!")
	line(0, "interface %s", p.iface)
	line(1, "qos trust dscp")
	line(1, "shape rate %d kbps", uint64(cfg.Rate)/1000)
	if ls := p.losslessClasses(); len(ls) > 0 {
		line(1, "priority-flow-control on")
		for _, i := range ls {
			line(1, "priority-flow-control priority %d no-drop", i)
		}
	}
	shares := equalShares(max(len(shared), 1))
	var limits []string
	for _, i := range p.usedClasses() {
		cc := &cfg.Classes[i]
		line(1, "!")
		line(1, "tx-queue %d", i)
		if cc.Strict {
			line(2, "priority strict")
		} else {
			line(2, "no priority")
			for k, s := range shared {
				if s == i {
					line(2, "bandwidth percent %d", shares[k])
				}
			}
		}
		if cv, ok := p.curveOf(i, "max-mark-probability"); ok {
			if cv.minBytes == 0 {
				p.refuse(i, "min_th", cc.MinThBytes.String(), "EOS's minimum-threshold is at least 1 byte")
			}
			if eosUnits(cv.maxBytes) > eosMaxThreshold {
				p.refuse(i, "max_th", cc.MaxThBytes.String(), "beyond EOS's largest threshold, 256000000 of its unit")
			}
			line(2, "random-detect ecn minimum-threshold %s maximum-threshold %s max-mark-probability %d weight 0",
				kbytes(cv.minBytes), kbytes(cv.maxBytes), cv.percent)
		}
		limits = append(limits, fmt.Sprintf("%d %s", i, cc.LimitBytes))
		if p.lossless(i) {
			p.note("%s: PPFC xoff %s xon %s: the PFC thresholds are the platform's headroom on EOS", p.class(i), cc.XoffBytes, cc.XonBytes)
		}
	}
	line(0, "!")
	p.note("class limits (%s) are the platform's shared buffer on EOS: not rendered", strings.Join(limits, ", "))
	if len(p.errs) > 0 {
		return "", errors.Join(p.errs...)
	}
	return p.header("! ") + "!\n" + out.b.String(), nil
}

// eosUnits is b in the unit kbytes writes it.
func eosUnits(b uint64) uint64 {
	if b%1024 == 0 {
		return b / 1024
	}
	return b
}
