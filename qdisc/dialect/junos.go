package dialect

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// junosRate spells bits/s as shaping-rate takes it: 500m, 25g, 1500k.
func junosRate(r units.Rate) string {
	v := uint64(r)
	for _, s := range []struct {
		div    uint64
		suffix string
	}{{1e9, "g"}, {1e6, "m"}, {1e3, "k"}} {
		if v%s.div == 0 {
			return strconv.FormatUint(v/s.div, 10) + s.suffix
		}
	}
	return strconv.FormatUint(v, 10)
}

// percentShares gives each of parts its share of total in whole percents
// that add up to 100 (largest remainder), each at least 1.
func percentShares(parts []uint64, total uint64) []int {
	out := make([]int, len(parts))
	type rem struct {
		i int
		r float64
	}
	var rems []rem
	sum := 0
	for i, v := range parts {
		exact := float64(v) * 100 / float64(total)
		out[i] = max(int(math.Floor(exact)), 1)
		sum += out[i]
		rems = append(rems, rem{i, exact - math.Floor(exact)})
	}
	for sum < 100 && len(rems) > 0 {
		best := 0
		for k := range rems {
			if rems[k].r > rems[best].r {
				best = k
			}
		}
		out[rems[best].i]++
		sum++
		rems = append(rems[:best], rems[best+1:]...)
	}
	return out
}

// junosName is a class's forwarding class (and scheduler) name: tc3-roce.
func (p *port) junosName(i int) string {
	n := "tc" + strconv.Itoa(i)
	if name := p.cfg.Classes[i].Name; name != "" {
		n += "-" + name
	}
	return n
}

// junos renders the port as Junos OS 23.4 class-of-service for QFX5000
// (curly-brace form, for load merge).
func (p *port) junos() (string, error) {
	cfg := p.cfg
	var b strings.Builder
	depth := 0
	line := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		if strings.HasPrefix(s, "}") {
			depth--
		}
		b.WriteString(strings.Repeat("    ", depth) + s + "\n")
		if strings.HasSuffix(s, "{") {
			depth++
		}
	}
	p.unusedNote()
	p.strictNote()
	base := "fabriclab-" + sonicBase(p.iface)
	used := p.usedClasses()

	// buffer-size is a percentage of the port's buffer.
	var limits []uint64
	var sum uint64
	for _, i := range used {
		limits = append(limits, uint64(cfg.Classes[i].LimitBytes))
		sum += uint64(cfg.Classes[i].LimitBytes)
	}
	portBuf := uint64(p.opt.PortBufferBytes)
	var bufPct []int
	if portBuf == 0 {
		portBuf = sum
		bufPct = percentShares(limits, sum)
		p.note("port buffer taken as %s, the rendered classes' limits side by side (set it to the switch's)", units.ByteSize(sum))
	} else {
		if portBuf < sum {
			p.refuse(-1, "port_buffer", units.ByteSize(portBuf).String(),
				fmt.Sprintf("must hold the rendered classes' limits, %s: buffer-size percentages would add up to more than 100", units.ByteSize(sum)))
		}
		for _, l := range limits {
			bufPct = append(bufPct, max(int(math.Round(float64(l)*100/float64(portBuf))), 1))
		}
	}
	queueBuf := map[int]uint64{} // what buffer-size gives each class
	pctOf := map[int]int{}
	for k, i := range used {
		pctOf[i] = bufPct[k]
		queueBuf[i] = portBuf * uint64(bufPct[k]) / 100
		if queueBuf[i] != uint64(cfg.Classes[i].LimitBytes) {
			p.note("%s: limit %s as buffer-size %d %% = %s", p.class(i), cfg.Classes[i].LimitBytes, bufPct[k], units.ByteSize(queueBuf[i]))
		}
	}
	// A fill level is a percentage of the queue's buffer.
	fill := func(i int, field string, th uint64) int {
		q := queueBuf[i]
		if q == 0 {
			return 0
		}
		pc := int(math.Round(float64(th) * 100 / float64(q)))
		if th > 0 && pc == 0 {
			pc = 1
		}
		pc = min(pc, 100)
		if got := q * uint64(pc) / 100; got != th {
			p.note("%s: %s %s as fill-level %d %% = %s", p.class(i), field, units.ByteSize(th), pc, units.ByteSize(got))
		}
		return pc
	}

	line("class-of-service {")
	line("classifiers {")
	line("dscp %s {", base)
	for _, i := range used {
		if len(p.dscps[i]) == 0 {
			continue
		}
		var cps []string
		for _, d := range p.dscps[i] {
			cps = append(cps, fmt.Sprintf("%06b", d))
		}
		line("forwarding-class %s {", p.junosName(i))
		line("loss-priority low code-points [ %s ];", strings.Join(cps, " "))
		line("}")
	}
	line("}")
	line("}")
	line("forwarding-classes {")
	for _, i := range used {
		line("class %s {", p.junosName(i))
		if p.lossless(i) {
			line("queue-num %d no-loss;", i)
			line("pfc-priority %d;", i)
		} else {
			line("queue-num %d;", i)
		}
		line("}")
	}
	line("}")
	ls := p.losslessClasses()
	if len(ls) > 0 {
		// DSCP-based PFC: the lab's fabric is routed and untagged.
		line("congestion-notification-profile %s-pfc {", base)
		line("input {")
		line("dscp {")
		for _, i := range ls {
			for _, d := range p.dscps[i] {
				line("code-point %06b {", d)
				line("pfc;")
				line("}")
			}
			p.note("%s: PPFC xoff %s xon %s: the PFC thresholds are the platform's headroom on Junos", p.class(i), cfg.Classes[i].XoffBytes, cfg.Classes[i].XonBytes)
		}
		line("}")
		line("}")
		line("}")
	}
	marking := false
	for _, i := range used {
		if _, ok := p.curveOf(i, "drop-probability"); ok {
			marking = true
		}
	}
	var notECT []string
	if marking {
		line("drop-profiles {")
		for _, i := range used {
			cv, ok := p.curveOf(i, "drop-probability")
			if !ok {
				continue
			}
			var lo, hi int
			if cv.minBytes == cv.maxBytes { // a step
				lo = fill(i, "K", cv.minBytes)
				hi = lo
			} else {
				lo, hi = fill(i, "min_th", cv.minBytes), fill(i, "max_th", cv.maxBytes)
			}
			if cv.minBytes < cv.maxBytes && lo == hi {
				p.refuse(i, "max_th", cfg.Classes[i].MaxThBytes.String(),
					fmt.Sprintf("min_th and max_th round to the same fill level (%d %% of %s): the curve would become a step", lo, units.ByteSize(queueBuf[i])))
			}
			line("%s-ecn {", p.junosName(i))
			line("interpolate {")
			line("fill-level [ %d %d ];", lo, hi)
			line("drop-probability [ 0 %d ];", cv.percent)
			line("}")
			line("}")
			if cfg.Classes[i].WREDDrop {
				notECT = append(notECT, strconv.Itoa(i))
			}
		}
		line("}")
	}
	// "On ECN-enabled queues, the switch does not use the drop profile to
	// control dropping packets that are not ECN-capable [...] the switch
	// uses the tail-drop algorithm" (Juniper, Configuring CoS WRED Drop
	// Profiles, QFX): the lab's default; wred-drop classes differ.
	if len(notECT) > 0 {
		p.note("%s: Not-ECT packets dropped on the curve in the lab (wred-drop); Junos tail-drops them on an ECN-enabled queue", classList(notECT))
	}
	for _, i := range used {
		if _, ok := p.curveOf(i, "drop-probability"); ok && p.lossless(i) {
			p.note("%s: ECN's drop profile on a no-loss class, which Juniper advises against (PFC alone there); DCQCN needs the marks: check that the platform takes it", p.class(i))
		}
	}
	var strict []string
	for _, i := range used {
		if cfg.Classes[i].Strict {
			strict = append(strict, strconv.Itoa(i))
		}
	}
	if len(strict) > 1 {
		p.note("%s are strict-high: QFX5100 and EX4600 take one strict-high queue (Juniper, the priority statement)", classList(strict))
	}
	shared := p.sharedClasses()
	shares := equalShares(max(len(shared), 1))
	line("schedulers {")
	for _, i := range used {
		line("%s {", p.junosName(i))
		if cfg.Classes[i].Strict {
			line("priority strict-high;")
		}
		for k, s := range shared {
			if s == i {
				line("transmit-rate percent %d;", shares[k])
			}
		}
		line("buffer-size percent %d;", pctOf[i])
		if _, ok := p.curveOf(i, "drop-probability"); ok {
			line("explicit-congestion-notification;")
			line("drop-profile-map loss-priority low protocol any drop-profile %s-ecn;", p.junosName(i))
		}
		line("}")
	}
	line("}")
	line("scheduler-maps {")
	line("%s {", base)
	for _, i := range used {
		line("forwarding-class %s scheduler %s;", p.junosName(i), p.junosName(i))
	}
	line("}")
	line("}")
	line("interfaces {")
	line("%s {", p.iface)
	line("scheduler-map %s;", base)
	line("shaping-rate %s;", junosRate(cfg.Rate))
	if len(ls) > 0 {
		line("congestion-notification-profile %s-pfc;", base)
	}
	line("unit 0 {")
	line("classifiers {")
	line("dscp %s;", base)
	line("}")
	line("}")
	line("}")
	line("}")
	line("}")
	if len(p.errs) > 0 {
		return "", errors.Join(p.errs...)
	}
	return "/*\n" + p.header(" * ") + " */\n" + b.String(), nil
}
