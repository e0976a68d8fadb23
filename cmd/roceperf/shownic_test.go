package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestShowNIC: --show-nic prints host/dcqcn's rendering of the profile a
// run would use, --dscp, --cnp-dscp and --dcqcn knobs included; its
// golden is the library's.
func TestShowNIC(t *testing.T) {
	run1 := func(args string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), strings.Fields(args), &out, &errb)
		return code, out.String(), errb.String()
	}
	want, err := os.ReadFile("../../host/dcqcn/testdata/mlx5_lab_1gbit.sh")
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run1("--show-nic eth0 -b 1g"); code != exitOK || out != string(want) {
		t.Errorf("exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, errOut, out, want)
	}
	code, out, _ := run1("--show-nic eth1 -b 25g --dcqcn-profile mlx5 --dscp 24 --cnp-dscp 46 --dcqcn cnp_802p_prio=5 --dcqcn rpg_ai_rate=10")
	for _, w := range []string{
		"# DCQCN profile mlx5 at line rate 25gbit",
		"mlnx_qos -i eth1 --dscp2prio set,24,3\n",
		"mlnx_qos -i eth1 --dscp2prio set,46,5\n",
		"echo 1 > /sys/class/net/eth1/ecn/roce_rp/enable/3\n",
		"echo 46 > /sys/class/net/eth1/ecn/roce_np/cnp_dscp  # DSCP\n",
		"echo 10 > /sys/class/net/eth1/ecn/roce_rp/rpg_ai_rate  # Mbit/s\n",
	} {
		if code != exitOK || !strings.Contains(out, w) {
			t.Errorf("exit %d; lacks %q:\n%s", code, w, out)
		}
	}
	// --rp off: the reaction point written disabled (roce_rp/enable 0).
	if code, out, _ := run1("--show-nic eth0 --rp off"); code != exitOK || !strings.Contains(out, "echo 0 > /sys/class/net/eth0/ecn/roce_rp/enable/3\n") ||
		strings.Contains(out, "echo 1 > /sys/class/net/eth0/ecn/roce_rp/enable/3") {
		t.Errorf("--rp off: exit %d:\n%s", code, out)
	}
	for args, want := range map[string]string{
		"--show-nic eth0 -s":                      "roceperf: --show-nic prints a sender's NIC settings: drop -s\n",
		"--show-nic eth0 --transport uet":         "roceperf: --show-nic eth0: a RoCEv2 option, not for --transport uet\n",
		"--show-nic eth0 --cc none":               "roceperf: --show-nic prints DCQCN's settings: not with --cc none\n",
		"--show-nic eth0 --timescale 10":          "roceperf: --show-nic: a NIC runs unscaled: drop --timescale\n",
		"--show-nic eth0 --dcqcn-profile fast":    "roceperf: --dcqcn-profile fast: must be lab or mlx5 or paper\n",
		"--show-nic eth0 --dcqcn rpg_threshold=0": "roceperf: --dcqcn: rpg_threshold=0: must be 1..255 (stages)\n",
		"--show-nic eth0;ls":                      "roceperf: --show-nic eth0;ls: dcqcn: device \"eth0;ls\": must be a network interface name",
	} {
		code, _, errOut := run1(args)
		if code != exitUsage || !strings.HasPrefix(errOut, want) {
			t.Errorf("roceperf %s: exit %d, stderr %q; want %q", args, code, errOut, want)
		}
	}
}
