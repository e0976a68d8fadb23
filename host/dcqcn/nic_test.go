package dcqcn_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestWriteMLX5Golden: the NIC settings of each profile, and of the lab
// profile with knobs set as roceperf --dcqcn sets them.
func TestWriteMLX5Golden(t *testing.T) {
	for _, tc := range []struct {
		file, profile string
		rate          units.Rate
		knobs         []cc.Knob
		nic           dcqcn.MLX5NIC
	}{
		{"mlx5_lab_1gbit.sh", "lab", units.Gbit, nil, dcqcn.MLX5NIC{Dev: "eth0", DSCP: 26, Profile: "lab"}},
		{"mlx5_mlx5_25gbit.sh", "mlx5", 25 * units.Gbit, nil, dcqcn.MLX5NIC{Dev: "enp1s0f0np0", DSCP: 26, Profile: "mlx5"}},
		{"mlx5_paper_40gbit.sh", "paper", 40 * units.Gbit,
			[]cc.Knob{{Name: "cnp_dscp", Value: "46"}, {Name: "cnp_802p_prio", Value: "5"}, {Name: "rpg_ai_rate", Value: "20.5"}},
			dcqcn.MLX5NIC{Dev: "eth1", DSCP: 24, Profile: "paper"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			p, err := dcqcn.New(tc.profile, tc.rate, tc.knobs...)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			if err := p.WriteMLX5(&b, tc.nic); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.file)
			if *update {
				if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -update writes it)", err)
			}
			if b.String() != string(want) {
				t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, b.String(), want)
			}
		})
	}
}

// TestWriteMLX5Knobs: every mlx5 knob is written under its own name, in
// the directory of its role, and DCQCN is enabled on the data's priority.
func TestWriteMLX5Knobs(t *testing.T) {
	p := dcqcn.MLX5Params(25 * units.Gbit)
	var b strings.Builder
	if err := p.WriteMLX5(&b, dcqcn.MLX5NIC{Dev: "eth0", DSCP: 26}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"mlnx_qos -i eth0 --trust dscp\n",
		"echo 1 > /sys/class/net/eth0/ecn/roce_np/enable/3\n",
		"echo 1 > /sys/class/net/eth0/ecn/roce_rp/enable/3\n",
		"echo 5 > /sys/class/net/eth0/ecn/roce_rp/rpg_ai_rate  # Mbit/s\n",
		"echo 4 > /sys/class/net/eth0/ecn/roce_np/min_time_between_cnps  # µs\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q", want)
		}
	}
	np := map[string]bool{"cnp_802p_prio": true, "cnp_dscp": true, "min_time_between_cnps": true}
	for _, k := range dcqcn.KnobNames() {
		dir := "roce_rp"
		if np[k] {
			dir = "roce_np"
		}
		if strings.Count(out, "/ecn/"+dir+"/"+k+" ") != 1 {
			t.Errorf("knob %s: not written once under %s", k, dir)
		}
	}
}

func TestWriteMLX5Refusals(t *testing.T) {
	p := dcqcn.LabParams(units.Gbit)
	for _, tc := range []struct {
		nic  dcqcn.MLX5NIC
		want string
	}{
		{dcqcn.MLX5NIC{Dev: "", DSCP: 26}, `dcqcn: device "": must be a network interface name`},
		{dcqcn.MLX5NIC{Dev: "eth0; reboot", DSCP: 26}, `dcqcn: device "eth0; reboot": must be`},
		{dcqcn.MLX5NIC{Dev: "eth0", DSCP: 64}, "dcqcn: DSCP 64: must be 0..63"},
	} {
		if err := p.WriteMLX5(&strings.Builder{}, tc.nic); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.nic, err, tc.want)
		}
	}
	bad := p
	bad.RPGGD = 0
	if err := bad.WriteMLX5(&strings.Builder{}, dcqcn.MLX5NIC{Dev: "eth0"}); err == nil || !strings.Contains(err.Error(), "rpg_gd=0") {
		t.Errorf("invalid params: err = %v", err)
	}
}
