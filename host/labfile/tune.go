//go:build linux

package labfile

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/fabriclab/fabriclab/host/conf"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/qdisc/aqm"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Tune derives a port's marking thresholds from the base RTTs of the flows
// through it (seed 002 §3.4, aqm.Tune): before the flows start, every
// sender of a flow through the port probes its base RTT to that flow's
// receiver through the idle port, and the ports' tc specs take the derived
// values by name ($k_tail, $ins_target, ...; TunedNames). Without a run
// (validate, plan) the values are the nominal ones: each sender's path
// delay both ways plus NominalHostRTT.
type Tune struct {
	// Port is "switch:dev", a port of a link with a rate: C is its rate,
	// and the senders are those of the flows through it. Required.
	Port string `yaml:"port"`
	// RTT is measured (UDP echoes before the flows) or nominal (the
	// path's delays: the same thresholds every run). Optional: measured.
	RTT string `yaml:"rtt"`
	// Probes is how many echoes each sender sends, 10 ms apart, after
	// three it discards (neighbour resolution, cold caches). Optional:
	// DefaultTuneProbes.
	Probes int `yaml:"probes"`
	// Lambda is λ of the instantaneous thresholds (K, ins_target, TCN's):
	// 1 for classic ECN, and today's practice with DCTCP too (seed 002
	// §5.2). Optional: 1.
	Lambda float64 `yaml:"lambda"`
	// PstLambda is λ of the persistent target (pst_target, CoDel's
	// target): the transport's, about 0.17 for DCTCP (§2.1, §3.4).
	// Optional: lambda.
	PstLambda float64 `yaml:"pst_lambda"`
}

// Tune's RTT sources and bounds.
const (
	TuneMeasured = "measured"
	TuneNominal  = "nominal"
	// DefaultTuneProbes is Tune.Probes' default, MaxTuneProbes its bound.
	DefaultTuneProbes = 50
	MaxTuneProbes     = 10000
	// NominalHostRTT is what the nominal RTTs add to the links' delays:
	// about what two veth hops and the hosts' stacks take here.
	NominalHostRTT = 100 * time.Microsecond
	// TuneMinLimit is $limit's floor: the class buffer is 4·K_tail, and
	// at least this for the slow-start overshoot.
	TuneMinLimit = 128 * units.KiB
	// tuneEchoPort is the receivers' UDP echo for the probes.
	tuneEchoPort = 7
)

// TunedNames are the values a tc spec may name as $name once a file has
// a tune block, with what each is (aqm.Tune's formulas).
var TunedNames = []struct{ Name, Is string }{
	{"k_tail", "λ·C·RTT_p90 (step-Tail's K, WRED's max)"},
	{"k_avg", "λ·C·RTT_avg (step-AVG's K, WRED's min)"},
	{"limit", "4·k_tail, at least 128 KiB (the class buffer)"},
	{"ins_target", "λ·RTT_p90 (ECN♯'s ins_target)"},
	{"ins_avg", "λ·RTT_avg (k_avg in time: ECN♯'s probabilistic curve from it)"},
	{"pst_target", "λ_pst·RTT_avg (ECN♯'s persistent target)"},
	{"pst_interval", "RTT_p90 (ECN♯'s persistent interval)"},
	{"codel_target", "λ_pst·RTT_avg (CoDel's target)"},
	{"codel_interval", "RTT_p90 (CoDel's interval)"},
	{"tcn", "λ·RTT_p90 (TCN's threshold)"},
}

func tunedNameList() string {
	names := make([]string, len(TunedNames))
	for i, n := range TunedNames {
		names[i] = "$" + n.Name
	}
	return strings.Join(names, ", ")
}

// tunedRef is a $name in a tc spec.
var tunedRef = regexp.MustCompile(`\$[A-Za-z0-9_]*`)

// TuneValues are the values the tc specs' $names stand for, and what
// they came from.
type TuneValues struct {
	// Source is measured or nominal.
	Source string `json:"source"`
	// Rate is C, the port's rate in the fabric's terms.
	Rate      units.Rate `json:"rate_bps"`
	Lambda    float64    `json:"lambda"`
	PstLambda float64    `json:"pst_lambda"`
	// RTTs are each sender's base RTT (µs, the fabric's: a measured one
	// over the timescale), and Pooled all of them together: Tune's
	// p50, p90 and mean.
	RTTs   []SenderRTT    `json:"rtts"`
	Pooled stats.Dist     `json:"pooled_rtt_us"`
	Out    aqm.TuneOutput `json:"tune"`
	// Values are the $names' values as substituted.
	Values map[string]string `json:"values"`
}

// SenderRTT is one sender's probes: to whom, the nominal RTT (µs) and,
// when measured, the samples' distribution (µs) and the probes lost.
type SenderRTT struct {
	From      string     `json:"from"`
	To        string     `json:"to"`
	NominalUS float64    `json:"nominal_us"`
	RTTUS     stats.Dist `json:"rtt_us"`
	Lost      int        `json:"lost,omitempty"`
}

// checkTune checks the tune block's fields that need no plan.
func (f *File) checkTune() error {
	t := f.Tune
	if t == nil {
		return nil
	}
	switch t.RTT {
	case "":
		t.RTT = TuneMeasured
	case TuneMeasured, TuneNominal:
	default:
		return conf.Errorf("tune.rtt", t.RTT, "want %s or %s (default %s)", TuneMeasured, TuneNominal, TuneMeasured)
	}
	if t.Probes == 0 {
		t.Probes = DefaultTuneProbes
	}
	if t.Probes < 1 || t.Probes > MaxTuneProbes {
		return conf.Errorf("tune.probes", t.Probes, "want 1..%d (default %d)", MaxTuneProbes, DefaultTuneProbes)
	}
	if t.Lambda == 0 {
		t.Lambda = 1
	}
	if t.Lambda < 0.01 || t.Lambda > 10 {
		return conf.Errorf("tune.lambda", t.Lambda, "want 0.01..10 (default 1)")
	}
	if t.PstLambda == 0 {
		t.PstLambda = t.Lambda
	}
	if t.PstLambda < 0.01 || t.PstLambda > 10 {
		return conf.Errorf("tune.pst_lambda", t.PstLambda, "want 0.01..10 (default lambda)")
	}
	return nil
}

// tuneProbe is one sender of the tuned port's flows and where it probes.
type tuneProbe struct {
	from, to string
	addr     netip.Addr
	dscp     uint8
	nominal  time.Duration // the fabric's
}

// tuneProbes are the senders of the flows through the tuned port, each
// with its first such flow's receiver, in file order; port is the port's
// Plan.Ports index.
func (f *File) tuneProbes(p *Plan) (probes []tuneProbe, port int, err error) {
	port = slices.IndexFunc(p.Ports, func(pp PortPlan) bool { return pp.Name == f.Tune.Port && !pp.Limiter })
	if port < 0 {
		return nil, 0, conf.Errorf("tune.port", f.Tune.Port, "no switch port there; ports are %s", p.portNames())
	}
	seen := map[string]bool{}
	for i := range p.Flows {
		fp := &p.Flows[i]
		if !slices.Contains(fp.Ports, port) || seen[fp.Flow.From] {
			continue
		}
		seen[fp.Flow.From] = true
		probes = append(probes, tuneProbe{from: fp.Flow.From, to: fp.Flow.To, addr: p.Servers[fp.Server].Addr.Addr(),
			dscp: fp.dscp(), nominal: p.Timescale.Fabric(fp.BaseRTT) + NominalHostRTT})
	}
	if len(probes) == 0 {
		return nil, 0, conf.Errorf("tune.port", f.Tune.Port, "no flow crosses this port: the tune needs the RTTs of the flows through it")
	}
	return probes, port, nil
}

// tuneValues derives the $names' values from per-sender RTT samples
// (the fabric's), pooled.
func (f *File) tuneValues(source string, rate units.Rate, probes []tuneProbe, samples [][]time.Duration, lost []int) (*TuneValues, error) {
	tv := &TuneValues{Source: source, Rate: rate, Lambda: f.Tune.Lambda, PstLambda: f.Tune.PstLambda}
	var pooled []float64
	for i, pr := range probes {
		us := make([]float64, len(samples[i]))
		for j, d := range samples[i] {
			us[j] = float64(d) / 1e3
		}
		sr := SenderRTT{From: pr.from, To: pr.to, NominalUS: float64(pr.nominal) / 1e3, RTTUS: stats.Summarize(us)}
		if lost != nil {
			sr.Lost = lost[i]
		}
		if len(us) == 0 {
			return nil, fmt.Errorf("tune: every one of %s's %d probes to %s was lost", pr.from, sr.Lost, pr.to)
		}
		tv.RTTs = append(tv.RTTs, sr)
		pooled = append(pooled, us...)
	}
	tv.Pooled = stats.Summarize(pooled)
	us := func(v float64) time.Duration { return time.Duration(v * 1e3) }
	out, err := aqm.Tune(aqm.TuneInput{Rate: rate, RTTp50: us(tv.Pooled.P50), RTTp90: us(tv.Pooled.P90), RTTAvg: us(tv.Pooled.Mean),
		Lambda: tv.Lambda, PstLambda: tv.PstLambda})
	if err != nil {
		return nil, err
	}
	tv.Out = out
	var insAvg time.Duration
	if out.KTailBytes > 0 {
		insAvg = time.Duration(float64(out.InsTarget) * float64(out.KAvgBytes) / float64(out.KTailBytes)).Round(time.Microsecond)
	}
	ns := func(d time.Duration) string { return fmt.Sprintf("%dns", d.Nanoseconds()) }
	b := func(s units.ByteSize) string { return fmt.Sprintf("%db", uint64(s)) }
	tv.Values = map[string]string{
		"k_tail": b(out.KTailBytes), "k_avg": b(out.KAvgBytes), "limit": b(max(4*out.KTailBytes, TuneMinLimit)),
		"ins_target": ns(out.InsTarget), "ins_avg": ns(insAvg), "pst_target": ns(out.PstTarget), "pst_interval": ns(out.PstInterval),
		"codel_target": ns(out.CoDelTarget), "codel_interval": ns(out.CoDelInterval), "tcn": ns(out.TCNThreshold),
	}
	return tv, nil
}

// Tuned is the values the file's tc specs' $names stand for when not
// measured: the nominal RTTs' (nil without a tune block). A run measures
// its own (Result.Tune).
func (f *File) Tuned() *TuneValues { return f.tuned }

// nominalTune is the values from the nominal RTTs of plan p's senders.
func (f *File) nominalTune(p *Plan) (*TuneValues, error) {
	probes, port, err := f.tuneProbes(p)
	if err != nil {
		return nil, err
	}
	samples := make([][]time.Duration, len(probes))
	for i, pr := range probes {
		samples[i] = []time.Duration{pr.nominal}
	}
	tv, err := f.tuneValues(TuneNominal, f.Links[p.Ports[port].Link].Rate, probes, samples, nil)
	if err != nil {
		return nil, conf.Errorf("tune", f.Tune.Port, "%v", err)
	}
	return tv, nil
}

// expandTuned replaces the $names in a tc spec by the file's tuned
// values; field names the spec in errors.
func (f *File) expandTuned(field, raw string) (string, error) {
	if !strings.Contains(raw, "$") {
		return raw, nil
	}
	var err error
	out := tunedRef.ReplaceAllStringFunc(raw, func(ref string) string {
		name := strings.TrimPrefix(ref, "$")
		v, ok := "", false
		if f.tuned != nil {
			v, ok = f.tuned.Values[name]
		}
		switch {
		case err != nil:
		case f.Tune == nil:
			err = conf.Errorf(field, raw, "%s is a tuned value: the file needs a tune block (docs/labfiles.md)", ref)
		case !ok:
			err = conf.Errorf(field, raw, "unknown tuned value %q; tune gives %s", ref, tunedNameList())
		}
		return v
	})
	return out, err
}

// planTuned plans the file (variant: a Variants index, or -1) with the
// tune's values tv: a run's ports with the RTTs it measured.
func (f *File) planTuned(variant int, tv *TuneValues) (*Plan, error) {
	vf := *f
	vf.tuned = tv
	pf := &vf
	if variant >= 0 {
		var err error
		if pf, err = vf.withVariant(variant); err != nil {
			return nil, err
		}
	}
	return newPlan(pf, false)
}

// measureTune probes the base RTTs of the tuned port's senders through
// the idle lab, derives the values from them and configures the ports
// whose specs name them; the run's plan becomes the tuned one.
func (r *runner) measureTune(ctx context.Context) error {
	t := r.f.Tune
	if t == nil {
		return nil
	}
	probes, port, err := r.f.tuneProbes(r.p)
	if err != nil {
		return err
	}
	rate := r.f.Links[r.p.Ports[port].Link].Rate
	var tv *TuneValues
	if t.RTT == TuneNominal {
		if tv, err = r.f.nominalTune(r.p); err != nil {
			return err
		}
	} else {
		samples, lost, err := r.probeRTTs(ctx, probes, t.Probes)
		if err != nil {
			return fmt.Errorf("tune: %w", err)
		}
		if tv, err = r.f.tuneValues(TuneMeasured, rate, probes, samples, lost); err != nil {
			return err
		}
	}
	np, err := r.f.planTuned(r.variant, tv)
	if err != nil {
		return fmt.Errorf("tune: the ports with the values from the %s RTTs (p50 %.0f µs, p90 %.0f µs): %w", tv.Source, tv.Pooled.P50, tv.Pooled.P90, err)
	}
	if len(np.Ports) != len(r.p.Ports) {
		return fmt.Errorf("tune: the tuned plan has %d ports, the lab %d", len(np.Ports), len(r.p.Ports))
	}
	for i := range np.Ports {
		if reflect.DeepEqual(np.Ports[i].Config, r.p.Ports[i].Config) {
			continue
		}
		if err := r.ports[i].Configure(np.Ports[i].Config); err != nil {
			return fmt.Errorf("tune: port %s: %w", np.Ports[i].Name, err)
		}
	}
	cp := *r.p
	cp.Ports = np.Ports
	r.p = &cp
	r.tuned = tv
	r.log.Info("tuned", "port", t.Port, "rtt", tv.Source, "rtt_p50_us", tv.Pooled.P50, "rtt_p90_us", tv.Pooled.P90, "k_tail", tv.Values["k_tail"])
	return nil
}

// probeRTTs sends n UDP echoes from every probe's sender to its receiver
// (a listener there for the run), 10 ms apart, in parallel, and returns
// the fabric's RTTs and the probes lost.
func (r *runner) probeRTTs(ctx context.Context, probes []tuneProbe, n int) ([][]time.Duration, []int, error) {
	const warm, gap = 3, 10 * time.Millisecond
	timeout := r.p.Timescale.Time(200 * time.Millisecond)
	var echoes []net.PacketConn
	var wg sync.WaitGroup
	defer func() {
		for _, c := range echoes {
			c.Close()
		}
		wg.Wait()
	}()
	listening := map[string]bool{}
	for _, pr := range probes {
		if listening[pr.to] {
			continue
		}
		listening[pr.to] = true
		var c net.PacketConn
		if err := r.lab.Node(pr.to).Do(func() (err error) {
			c, err = net.ListenPacket("udp", fmt.Sprintf(":%d", tuneEchoPort))
			return err
		}); err != nil {
			return nil, nil, fmt.Errorf("echo on %s: %w", pr.to, err)
		}
		echoes = append(echoes, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256)
			for {
				m, from, err := c.ReadFrom(buf)
				if err != nil {
					return // closed
				}
				_, _ = c.WriteTo(buf[:m], from)
			}
		}()
	}
	samples := make([][]time.Duration, len(probes))
	lost := make([]int, len(probes))
	errs := make([]error, len(probes))
	var pg sync.WaitGroup
	for i, pr := range probes {
		pg.Add(1)
		go func() {
			defer pg.Done()
			errs[i] = r.probe(ctx, pr, n+warm, warm, gap, timeout, &samples[i], &lost[i])
		}()
	}
	pg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	for i := range samples {
		for j := range samples[i] {
			samples[i][j] = r.p.Timescale.Fabric(samples[i][j])
		}
	}
	return samples, lost, nil
}

// probe is one sender's echoes: count of them, the first warm not kept.
func (r *runner) probe(ctx context.Context, pr tuneProbe, count, warm int, gap, timeout time.Duration, samples *[]time.Duration, lost *int) error {
	var conn *net.UDPConn
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(pr.addr, tuneEchoPort))
	if err := r.lab.Node(pr.from).Do(func() (err error) {
		conn, err = net.DialUDP("udp", nil, dst)
		return err
	}); err != nil {
		return fmt.Errorf("probe from %s: %w", pr.from, err)
	}
	defer conn.Close()
	// The flows' DSCP: the probes take their class at the port.
	tos := ipv4.NewConn(conn).SetTOS
	if !pr.addr.Is4() {
		tos = ipv6.NewConn(conn).SetTrafficClass
	}
	if err := tos(int(pr.dscp) << 2); err != nil {
		return fmt.Errorf("probe from %s: DSCP %d: %w", pr.from, pr.dscp, err)
	}
	out, in := make([]byte, 64), make([]byte, 64)
	for seq := range count {
		if err := ctx.Err(); err != nil {
			return err
		}
		binary.BigEndian.PutUint64(out, uint64(seq))
		t0 := time.Now()
		if _, err := conn.Write(out); err != nil {
			return fmt.Errorf("probe from %s: %w", pr.from, err)
		}
		_ = conn.SetReadDeadline(t0.Add(timeout))
		got := false
		for range 16 { // late answers to earlier probes
			m, err := conn.Read(in)
			if err != nil {
				break
			}
			if m >= 8 && binary.BigEndian.Uint64(in) == uint64(seq) {
				got = true
				break
			}
		}
		rtt := time.Since(t0)
		if seq >= warm {
			if got {
				*samples = append(*samples, rtt)
			} else {
				*lost++
			}
		}
		if wait := gap - time.Since(t0); wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}
	return nil
}

// TuneText is the tune's values in two lines: the RTTs and what came of
// them.
func (tv *TuneValues) TuneText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tuned from %s RTTs: p50 %.0f µs, mean %.0f µs, p90 %.0f µs (", tv.Source, tv.Pooled.P50, tv.Pooled.Mean, tv.Pooled.P90)
	for i, s := range tv.RTTs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.0f", s.From, s.RTTUS.P50)
	}
	fmt.Fprintf(&b, "); λ %g, λ_pst %g, C %s\n", tv.Lambda, tv.PstLambda, tv.Rate)
	names := make([]string, 0, len(tv.Values))
	for n := range tv.Values {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		return slices.IndexFunc(TunedNames, func(t struct{ Name, Is string }) bool { return t.Name == names[i] }) <
			slices.IndexFunc(TunedNames, func(t struct{ Name, Is string }) bool { return t.Name == names[j] })
	})
	b.WriteString("  ")
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "$%s %s", n, tunedText(tv.Values[n]))
	}
	return b.String()
}

// tunedText is a value as read: bytes in KB, times in µs.
func tunedText(v string) string {
	if d, err := units.ParseDuration(v); err == nil && strings.HasSuffix(v, "ns") {
		return units.FormatDuration(d)
	}
	if s, err := units.ParseSize(v); err == nil {
		return fmt.Sprintf("%.1f KB", float64(s)/1e3)
	}
	return v
}
