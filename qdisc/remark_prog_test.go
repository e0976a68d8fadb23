package qdisc

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// TestRemark: a remarking class's packets leave with its DSCP and their
// own ECN bits (CE where the class marked them), IPv4's checksum right and
// every other byte as it was; the port classified them by the DSCP they
// came with; other classes' packets pass as they were.
func TestRemark(t *testing.T) {
	cfg := testConfig() // class 3: step at 10,000 bytes
	cfg.Classes[ClassRoCE].Remark = true
	o := loadTest(t, cfg, QueueVeth)
	for _, v6 := range []bool{false, true} {
		for _, ecn := range []uint8{notECT, ect0, ect1, ce} {
			for _, congested := range []bool{false, true} {
				t.Run(fmt.Sprintf("v6=%v/ecn=%d/congested=%v", v6, ecn, congested), func(t *testing.T) {
					setBacklog(t, o, ClassRoCE, map[bool]uint64{false: 0, true: 20000}[congested])
					in := craft(t, pktSpec{v6: v6, dscp: 26, ecn: ecn, payload: 200})
					c0 := stats(t, o).Classes[ClassRoCE]
					r := run(t, o.PortEnqueue, in, skbCtx{})
					if r.ret != tcActOK {
						t.Fatalf("verdict %d, want TC_ACT_OK", r.ret)
					}
					wantECN := ecn
					if congested && ecn != notECT {
						wantECN = ce
					}
					if r.dscp != 0 || r.ecn != wantECN {
						t.Errorf("left with dscp %d ecn %d, want dscp 0 ecn %d", r.dscp, r.ecn, wantECN)
					}
					l3 := 14
					if !v6 && !ipv4ChecksumOK(r.out[l3:l3+20]) {
						t.Errorf("IPv4 header checksum does not verify: % x", r.out[l3:l3+20])
					}
					if v6 {
						ip6 := r.pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
						if ip6.FlowLabel != 0xabcde || ip6.Version != 6 {
							t.Errorf("version %d flow label %#x: want 6, 0xabcde", ip6.Version, ip6.FlowLabel)
						}
					}
					// The traffic-class bytes (IPv4: TOS and the checksum) may change, nothing else.
					changed := map[int]bool{l3 + 1: true, l3 + 10: true, l3 + 11: true}
					if v6 {
						changed = map[int]bool{l3: true, l3 + 1: true}
					}
					for i := range r.out {
						if !changed[i] && r.out[i] != in[i] {
							t.Errorf("byte %d changed: %#02x -> %#02x", i, in[i], r.out[i])
						}
					}
					c1 := stats(t, o).Classes[ClassRoCE]
					if c1.EnqueuedPackets != c0.EnqueuedPackets+1 || c1.RemarkedPackets != c0.RemarkedPackets+1 {
						t.Errorf("class 3: enqueued %d -> %d, remarked %d -> %d: want one more each", c0.EnqueuedPackets, c1.EnqueuedPackets, c0.RemarkedPackets, c1.RemarkedPackets)
					}
				})
			}
		}
	}
	// Class 0 does not remark: DSCP 10 passes as it came.
	setBacklog(t, o, ClassRoCE, 0)
	r := run(t, o.PortEnqueue, craft(t, pktSpec{dscp: 10, ecn: ect0, payload: 200}), skbCtx{})
	if r.dscp != 10 || r.ecn != ect0 {
		t.Errorf("class 0: left with dscp %d ecn %d, want 10 and 2", r.dscp, r.ecn)
	}
	if n := stats(t, o).Classes[ClassBestEffort].RemarkedPackets; n != 0 {
		t.Errorf("class 0 remarked %d packets", n)
	}
}

// applyTC parses one --tc option and applies it to cfg.
func applyTC(cfg *Config, raw string) error {
	s, err := ParseTC(raw)
	if err != nil {
		return err
	}
	return s.Apply(cfg)
}

// TestRemarkConfig: the --tc grammar turns remarking on and off, validation
// refuses a DSCP out of range, and the maps give back what was written.
func TestRemarkConfig(t *testing.T) {
	cfg := testConfig()
	if err := applyTC(&cfg, "3:remark=0"); err != nil {
		t.Fatal(err)
	}
	if cc := cfg.Classes[3]; !cc.Remark || cc.RemarkDSCP != 0 {
		t.Fatalf("3:remark=0: remark %v dscp %d", cc.Remark, cc.RemarkDSCP)
	}
	if err := applyTC(&cfg, "3:remark=46"); err != nil || cfg.Classes[3].RemarkDSCP != 46 {
		t.Fatalf("3:remark=46: %v, dscp %d", err, cfg.Classes[3].RemarkDSCP)
	}
	for spec, want := range map[string]string{
		"3:remark=64":          `remark "64": want a DSCP, 0-63`,
		"3:remark=0,no-remark": "given twice",
		"3:remark=x":           `remark "x"`,
		"3:remark=1,remark=2":  "given twice",
	} {
		c := testConfig()
		if err := applyTC(&c, spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", spec, err, want)
		}
	}
	if err := applyTC(&cfg, "3:no-remark"); err != nil || cfg.Classes[3].Remark {
		t.Errorf("3:no-remark: %v, remark %v", err, cfg.Classes[3].Remark)
	}
	bad := testConfig()
	bad.Classes[3].Remark, bad.Classes[3].RemarkDSCP = true, 64
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "remark_dscp (64) must be 0 to 63") {
		t.Errorf("remark_dscp 64: %v", err)
	}
	bad.Classes[3].Remark, bad.Classes[3].RemarkDSCP = false, 5
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "remark_dscp (5) needs remark") {
		t.Errorf("remark_dscp without remark: %v", err)
	}
	cfg.Classes[3].Remark, cfg.Classes[3].RemarkDSCP = true, 12
	o := loadTest(t, cfg, QueueVeth)
	back, _, err := readConfig(&o.PortMaps, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if cc := back.Classes[3]; !cc.Remark || cc.RemarkDSCP != 12 {
		t.Errorf("read back: remark %v dscp %d", cc.Remark, cc.RemarkDSCP)
	}
}
