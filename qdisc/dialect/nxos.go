package dialect

import (
	"errors"
	"slices"
	"strconv"

	"github.com/fabriclab/fabriclab/qdisc"
)

// nxosQueue is the 8q template's queuing class of queue q.
func nxosQueue(q int) string {
	if q == 0 {
		return "c-out-8q-q-default"
	}
	return "c-out-8q-q" + strconv.Itoa(q)
}

// nxos renders the port as Cisco NX-OS 10.3 (Nexus 9000) configuration:
// an input qos policy sets qos-group N for class N's DSCPs, an output
// queuing policy schedules and marks queue N, the system's network-qos
// policy makes the lossless classes no-drop.
func (p *port) nxos() (string, error) {
	cfg := p.cfg
	out := indented{step: "  "}
	line := out.line
	p.unusedNote()
	p.strictNote()
	name := "fabriclab-" + sonicBase(p.iface)

	// class-default takes the class most DSCPs go to.
	common := 0
	for i := range p.dscps {
		if len(p.dscps[i]) > len(p.dscps[common]) {
			common = i
		}
	}
	for _, i := range p.usedClasses() {
		if i == common || len(p.dscps[i]) == 0 {
			continue
		}
		line(0, "class-map type qos match-any %s-tc%d", name, i)
		line(1, "match dscp %s", qdisc.DSCPRuns(p.dscps[i], ",", "-"))
	}
	line(0, "policy-map type qos %s-in", name)
	for _, i := range p.usedClasses() {
		if i == common || len(p.dscps[i]) == 0 {
			continue
		}
		line(1, "class %s-tc%d", name, i)
		line(2, "set qos-group %d", i)
	}
	line(1, "class class-default")
	line(2, "set qos-group %d", common)

	shared := p.sharedClasses()
	shares := equalShares(max(len(shared), 1))
	var notECT []string
	line(0, "policy-map type queuing %s-out", name)
	// Strict queues first, the highest at level 1 (NX-OS serves lower
	// levels first).
	level := 1
	used := p.usedClasses()
	for k := len(used) - 1; k >= 0; k-- {
		i := used[k]
		if !cfg.Classes[i].Strict {
			continue
		}
		line(1, "class type queuing %s", nxosQueue(i))
		line(2, "priority level %d", level)
		line(2, "queue-limit %s", kbytes(uint64(cfg.Classes[i].LimitBytes)))
		level++
	}
	for q := 7; q >= 0; q-- {
		if p.used[q] && cfg.Classes[q].Strict {
			continue
		}
		cc := &cfg.Classes[q]
		line(1, "class type queuing %s", nxosQueue(q))
		share := 0
		for k, s := range shared {
			if s == q {
				share = shares[k]
			}
		}
		line(2, "bandwidth remaining percent %d", share)
		if !p.used[q] {
			continue
		}
		line(2, "queue-limit %s", kbytes(uint64(cc.LimitBytes)))
		if cv, ok := p.curveOf(q, "drop-probability"); ok {
			line(2, "random-detect minimum-threshold %s maximum-threshold %s drop-probability %d weight 0 ecn",
				kbytes(cv.minBytes), kbytes(cv.maxBytes), cv.percent)
			if !cc.WREDDrop {
				notECT = append(notECT, strconv.Itoa(q))
			}
		}
	}
	if len(notECT) > 0 {
		slices.Sort(notECT) // one digit each
		p.note("%s: Not-ECT packets pass to the limit in the lab; NX-OS drops them on the WRED curve (its non-ECN threshold, where the platform has one, comes closest)", classList(notECT))
	}
	ls := p.losslessClasses()
	if len(ls) > 0 {
		line(0, "policy-map type network-qos fabriclab-nq")
		for _, i := range ls {
			line(1, "class type network-qos c-8q-nq%d", i)
			line(2, "pause pfc-cos %d", i)
			// network-qos's MTU is 1500 unless set: RoCE's jumbo frames
			// (Cisco's RoCE templates set 9216 on the no-drop class).
			line(2, "mtu 9216")
			p.note("%s: PPFC xoff %s xon %s: the PFC thresholds are the platform's buffer carving on NX-OS", p.class(i), cfg.Classes[i].XoffBytes, cfg.Classes[i].XonBytes)
		}
		line(0, "system qos")
		line(1, "service-policy type network-qos fabriclab-nq")
		p.note("network-qos is system-wide: the no-drop classes hold for every port")
	}
	line(0, "interface %s", p.iface)
	if len(ls) > 0 {
		line(1, "priority-flow-control mode on")
	}
	line(1, "service-policy type qos input %s-in", name)
	line(1, "service-policy type queuing output %s-out", name)
	p.note("port rate %s: the interface's speed on NX-OS (no port shaper rendered)", cfg.Rate)
	if len(p.errs) > 0 {
		return "", errors.Join(p.errs...)
	}
	return p.header("! ") + "!\n" + out.b.String(), nil
}
