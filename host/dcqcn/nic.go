package dcqcn

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// MLX5NIC is the NVIDIA ConnectX port a profile is written out for
// (Params.WriteMLX5).
type MLX5NIC struct {
	// Dev is the port's netdev, as in /sys/class/net/Dev. Required.
	Dev string
	// DSCP marks the RoCE data; its priority is DSCP/8, the NIC's
	// default DSCP to priority map, written out explicitly.
	DSCP uint8
	// Profile names the profile in the header. Optional.
	Profile string
	// RPOff writes the reaction point disabled (roce_rp/enable 0: the NIC
	// ignores CNPs; seed 000's misconfiguration, as roceperf --rp off).
	RPOff bool
}

// npKnobs are the notification point's (roce_np); every other mlx5 knob is
// the reaction point's (roce_rp).
var npKnobs = []string{"cnp_802p_prio", "cnp_dscp", "min_time_between_cnps"}

// zeroMeans says what 0 means for the knobs where it is no quantity.
var zeroMeans = map[string]string{
	"rpg_max_rate":               "the port's speed",
	"rate_to_set_on_first_cnp":   "keep the current rate",
	"rate_reduce_monitor_period": "every CNP cuts",
}

// mlx5MaxAlpha is initial_alpha_value's largest in firmware (of 1024).
const mlx5MaxAlpha = 1023

// WriteMLX5 writes p as the settings of an NVIDIA ConnectX NIC, a shell
// script: mlnx_qos for DSCP trust and the DSCP to priority map, then each
// mlx5 knob into MLNX_OFED's /sys/class/net/DEV/ecn/roce_np|roce_rp/<knob>
// under its own name (dcqcn.md; upstream mlx5 has the same knobs in
// debugfs cc_params), with DCQCN enabled on the data's priority. sysfs
// takes whole numbers in the knobs' units (Mbit/s, µs, bytes, of 1024): a
// value of p that is not whole is rounded, at least 1 where p's is above
// 0, and the line says so. The variant switches are no NIC's settings:
// the script lists them in a comment, with the firmware's behaviour.
func (p Params) WriteMLX5(w io.Writer, nic MLX5NIC) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if !netdevName(nic.Dev) {
		return fmt.Errorf("dcqcn: device %q: must be a network interface name (1 to 15 letters, digits, '.', '_', '-', ':' or '@')", nic.Dev)
	}
	if nic.DSCP > 63 {
		return fmt.Errorf("dcqcn: DSCP %d: must be 0..63", nic.DSCP)
	}
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	prio := nic.DSCP >> 3
	profile := nic.Profile
	if profile == "" {
		profile = "(custom)"
	}
	sys := "/sys/class/net/" + nic.Dev + "/ecn/"

	line("#!/bin/sh")
	line("# DCQCN profile %s at line rate %s as NVIDIA ConnectX (mlx5) settings:", profile, p.LineRate)
	line("# MLNX_OFED's mlnx_qos and %s (root). Rates are the", strings.TrimSuffix(sys, "/"))
	line("# profile's at that line rate: for a NIC of another speed, give its speed.")
	line("# RoCE data: DSCP %d, priority %d. CNPs: DSCP %d, priority %d.", nic.DSCP, prio, p.CNPDSCP, p.CNP802pPrio)
	line("set -e")
	line("mlnx_qos -i %s --trust dscp", nic.Dev)
	line("mlnx_qos -i %s --dscp2prio set,%d,%d", nic.Dev, nic.DSCP, prio)
	line("mlnx_qos -i %s --dscp2prio set,%d,%d", nic.Dev, p.CNPDSCP, p.CNP802pPrio)
	pfc := make([]string, 8)
	for i := range pfc {
		pfc[i] = "0"
	}
	pfc[prio] = "1"
	line("# A lossless fabric (the switch's PFC no-drop class) also wants:")
	line("#   mlnx_qos -i %s --pfc %s", nic.Dev, strings.Join(pfc, ","))

	line("# NP (receiver): a CNP for CE-marked RoCE packets of priority %d", prio)
	line("echo 1 > %sroce_np/enable/%d", sys, prio)
	for _, name := range npKnobs {
		p.writeKnob(&b, sys+"roce_np/", name)
	}
	if nic.RPOff {
		line("# RP (sender) off on priority %d: the NIC ignores CNPs (seed 000's misconfiguration)", prio)
		line("echo 0 > %sroce_rp/enable/%d", sys, prio)
	} else {
		line("# RP (sender): DCQCN on priority %d", prio)
		line("echo 1 > %sroce_rp/enable/%d", sys, prio)
	}
	for _, name := range KnobNames() {
		if !slices.Contains(npKnobs, name) {
			p.writeKnob(&b, sys+"roce_rp/", name)
		}
	}

	fw := MLX5Params(p.LineRate)
	line("# Not NIC settings: where implementations differ, this profile takes")
	for _, name := range VariantNames() {
		v, _ := p.Get(name)
		f, _ := fw.Get(name)
		if name == "rate_validation" {
			f = "0" // the firmware always sends at Rc
		}
		if v == f {
			line("#   %s %s (the firmware's)", name, v)
		} else {
			line("#   %s %s (the firmware's: %s)", name, v, f)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeKnob writes one knob's echo line: the value in sysfs's whole units,
// a comment with the unit and any rounding.
func (p Params) writeKnob(b *strings.Builder, dir, name string) {
	k, _ := lookupKnob(name) // a name of KnobNames
	v := k.get(&p)
	val := strconv.FormatInt(v, 10)
	comment := k.unit
	whole := func(x float64, unit string) {
		n := math.Round(x)
		if x > 0 && n == 0 {
			n = 1
		}
		val = strconv.FormatFloat(n, 'f', 0, 64)
		if n != x {
			comment += fmt.Sprintf("; %s %s in the profile, sysfs takes whole %s", strconv.FormatFloat(x, 'f', -1, 64), unit, unit)
		}
	}
	switch k.kind {
	case kindRate:
		whole(float64(v)/1e6, "Mbit/s")
	case kindTime:
		whole(float64(v)/1e3, "µs")
	}
	if z, ok := zeroMeans[name]; ok && v == 0 {
		comment += "; 0: " + z
	}
	if name == "initial_alpha_value" && v > mlx5MaxAlpha {
		val = strconv.Itoa(mlx5MaxAlpha)
		comment += fmt.Sprintf("; %d (α = 1.0) in the profile, the firmware's largest is %d", v, mlx5MaxAlpha)
	}
	fmt.Fprintf(b, "echo %s > %s%s  # %s\n", val, dir, name, comment)
}

// netdevName reports whether s is a Linux interface name safe to put in a
// shell line.
func netdevName(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-:@", r)) {
			return false
		}
	}
	return true
}
