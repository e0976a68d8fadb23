//go:build linux

package labfile

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabriclab/fabriclab/host/cm"
	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/host/perf"
)

// maxMatrixFlowsShown is how many of a matrix's flows a summary lists.
const maxMatrixFlowsShown = 16

// matrixRun runs a workload's triggers (cm.Scheduler) during a run.
type matrixRun struct {
	m     *cm.Matrix
	first int
	flows []*flowRun // the run's, matrix connection i at first+i
	// stop ends the run when a flow of the matrix fails: the flows its
	// triggers would start never can.
	stop context.CancelFunc

	mu    sync.Mutex
	sched *cm.Scheduler

	// t0 is the run's start, known once every gated flow is set up
	// (prepare); clock waits for it.
	t0      time.Time
	started chan struct{}
}

// setupPerFlow is what a gated flow's setup may add to the run's
// deadline beyond perf's dial timeout: the setups share the CPUs.
const setupPerFlow = 50 * time.Millisecond

// setupAllowance is the time the gated flows' setup may take before the
// run's clock starts.
func (r *runner) setupAllowance(flows []*flowRun) time.Duration {
	n := 0
	for _, fr := range flows {
		if isGated(fr) {
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return perf.DialTimeout + time.Duration(min(n, SetupAhead))*setupPerFlow
}

// clock is the run's start, once set.
func (mr *matrixRun) clock() time.Time {
	<-mr.started
	return mr.t0
}

// SetupAhead is how many of a matrix's flows are set up and not yet
// finished at a time: the first SetupAhead (in the order the triggers
// would start them, alone on the fabric) before the run's clock starts,
// each later one as an earlier one ends. A matrix of thousands of flows
// then holds a hundred-odd agents or endpoints, not thousands, and a
// flow is set up long before its trigger fires.
const SetupAhead = 128

// concurrentSetups bounds the gated flows set up at once.
const concurrentSetups = 8

// prepareGated starts the gated flows, wg counting them, and returns
// when the first SetupAhead are set up (their data held at their gates)
// or have failed: the run's clock starts after, so that no setup is on
// the timeline.
func (r *runner) prepareGated(ctx context.Context, flows []*flowRun, wg *sync.WaitGroup) {
	order := r.setupOrder(flows)
	first := min(len(order), SetupAhead)
	var ready sync.WaitGroup
	ready.Add(first)
	wg.Add(len(order))
	slots := make(chan struct{}, SetupAhead)
	setups := make(chan struct{}, concurrentSetups)
	go func() {
		for k, fr := range order {
			done := func() {}
			if k < first {
				done = ready.Done
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				for k2 := k; k2 < len(order); k2++ { // never set up: not started
					if k2 < first {
						ready.Done()
					}
					wg.Done()
				}
				return
			}
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				// A few setups at a time: dozens at once in one namespace
				// failed to bind UDP 4791 (EADDRINUSE) in a 3,600-flow
				// run; 8 at a time never did.
				setups <- struct{}{}
				var once sync.Once
				r.runGated(ctx, fr, func() {
					once.Do(func() {
						<-setups
						done()
					})
				})
			}()
		}
	}()
	ready.Wait()
}

// setupOrder is the gated flows in the order the triggers would start
// them with each flow at its ideal FCT (file order among equals).
func (r *runner) setupOrder(flows []*flowRun) []*flowRun {
	m := r.scaledMatrix()
	start, _, err := m.Replay(func(i int) (time.Duration, time.Duration) {
		fp := flows[r.f.matrixFirst+i].plan
		d := fp.IdealFCT(m.Conns[i].Size)
		return d, max(d-fp.BaseRTT/2, 0)
	})
	var order []*flowRun
	for _, fr := range flows {
		if r.matrix.gated(fr) {
			order = append(order, fr)
		}
	}
	if err == nil {
		slices.SortStableFunc(order, func(a, b *flowRun) int {
			return cmp.Compare(start[a.plan.Flow.conn-1], start[b.plan.Flow.conn-1])
		})
	}
	return order
}

// newMatrixRun readies the triggered flows of the run's matrix, or
// returns nil without one.
func (r *runner) newMatrixRun(flows []*flowRun, stop context.CancelFunc) *matrixRun {
	m := r.f.matrix
	if m == nil {
		return nil
	}
	mr := &matrixRun{m: m, first: r.f.matrixFirst, flows: flows, stop: stop, sched: cm.NewScheduler(m), started: make(chan struct{})}
	for i, c := range m.Conns {
		if c.Trigger != 0 {
			flows[mr.first+i].trigger = make(chan time.Duration, 1)
		}
	}
	return mr
}

// scaledMatrix is the matrix with its start times on the run's
// timeline.
func (r *runner) scaledMatrix() *cm.Matrix {
	m := *r.f.matrix
	m.Conns = slices.Clone(m.Conns)
	for i := range m.Conns {
		m.Conns[i].Start = r.scaled(m.Conns[i].Start)
	}
	return &m
}

// matrixDeadline is when the matrix's last flow is cut if each flow
// takes its whole budget.
func (r *runner) matrixDeadline(flows []*flowRun) time.Duration {
	m := r.scaledMatrix()
	_, end, err := m.Replay(func(i int) (time.Duration, time.Duration) {
		b := r.seriesBudget(flows[r.f.matrixFirst+i])
		return b, b
	})
	if err != nil {
		return 0 // Check refused such a matrix at load
	}
	return slices.Max(append(end, 0))
}

// done is connection fr's end at now: its receiver's and then its
// sender's triggers activate (a lab flow completes at its sender, when
// its last byte is acknowledged: a receive-done trigger fires then, half
// a round trip after htsim's), and the flows they start are told. A
// failed flow stops the run.
func (mr *matrixRun) done(fr *flowRun, now time.Duration, failed error) {
	i := fr.plan.Flow.conn - 1
	if failed != nil {
		mr.stop()
		return
	}
	mr.mu.Lock()
	a, err1 := mr.sched.RecvDone(i)
	b, err2 := mr.sched.SendDone(i)
	mr.mu.Unlock()
	if err1 != nil || err2 != nil {
		mr.stop() // Check refused such a matrix at load
		return
	}
	for _, j := range append(a, b...) {
		mr.flows[mr.first+j].trigger <- now
	}
}

// MatrixResult is what a workload's matrix did: each collective's
// completion time against its ideal.
type MatrixResult struct {
	// Source is the .cm file or the generator that made the matrix.
	Source      string `json:"source"`
	Nodes       int    `json:"nodes"`
	Connections int    `json:"connections"`
	Triggers    int    `json:"triggers"`
	Completed   int    `json:"completed"`
	// All is the whole matrix; Groups its collectives (cm.Groups: flows
	// tied by triggers; an untriggered flow is a group of its own), in
	// order of their first connection.
	All    CollectiveResult   `json:"all"`
	Groups []CollectiveResult `json:"groups,omitempty"`
	// FCTRatio is the completed flows' FCT / ideal.
	FCTRatio stats.Dist `json:"fct_ratio"`
	// Uplinks is how ECMP (or the senders' entropy balancing) spread
	// each switch's traffic over the tier above (a leaf-spine with more
	// than one spine, a fat tree).
	Uplinks []UplinkSpread `json:"uplinks,omitempty"`
	// Htsim is htsim's run of the same matrix (RunOptions.Htsim), or why
	// there is none.
	Htsim *HtsimMatrixRun `json:"htsim,omitempty"`
	// SetupS is each flow's setup (its agent, side channel and QPs on
	// the host): before the run's clock for a flow set up ahead, else
	// from its start to its first byte.
	SetupS stats.Dist `json:"setup_s"`
	// Credit is the receivers' RCCC pacers summed (nil without RCCC).
	Credit *CreditResult `json:"credit,omitempty"`
}

// CreditResult is what the receivers' RCCC pacers granted: every grant,
// and the slow pulls among them (credit no sender asked for, given while
// none waited).
type CreditResult struct {
	Grants        uint64 `json:"grants"`
	GrantedBytes  uint64 `json:"granted_bytes"`
	SlowPulls     uint64 `json:"slow_pulls"`
	SlowPullBytes uint64 `json:"slow_pull_bytes"`
}

// credit sums the UET servers' pacers; nil where none granted.
func credit(servers []ServerResult) *CreditResult {
	var c CreditResult
	for _, sv := range servers {
		if p := sv.Pacer; p != nil {
			c.Grants += p.Grants
			c.GrantedBytes += p.GrantedBytes
			c.SlowPulls += p.SlowPulls
			c.SlowPullBytes += p.SlowPullBytes
		}
	}
	if c.Grants == 0 {
		return nil
	}
	return &c
}

func (mr *MatrixResult) creditGrants() uint64 {
	if mr.Credit == nil {
		return 0
	}
	return mr.Credit.Grants
}

// CollectiveResult is one collective's (or the whole matrix's)
// completion time: from its first flow's start to its last flow's end.
type CollectiveResult struct {
	Flows  int     `json:"flows"`
	StartS float64 `json:"start_s"`
	EndS   float64 `json:"end_s"`
	CCTS   float64 `json:"cct_s"`
	// IdealCCTS replays the triggers over each flow's ideal FCT (alone at
	// its bottleneck, plus its base RTT): what the collective takes on a
	// fabric where its flows never meet.
	IdealCCTS float64 `json:"ideal_cct_s"`
	CCTRatio  float64 `json:"cct_ratio"`
	// ReplayCCTS replays them over each flow's measured FCT (from its
	// first byte sent to its last acknowledged): the collective as the
	// fabric carried its flows, less the time the host took between a
	// flow's end and its successors' first bytes (the triggers' latency
	// here, a connection's setup for a flow not set up ahead).
	ReplayCCTS  float64 `json:"replay_cct_s"`
	ReplayRatio float64 `json:"replay_cct_ratio"`
}

// UplinkSpread is a switch's bytes toward the tier above, port by port.
type UplinkSpread struct {
	// Leaf is the switch: a leaf, a fat tree's ToR or aggregation switch.
	Leaf string `json:"leaf"`
	// Spines and Bytes are its uplink ports' far ends and what each sent.
	Spines []string `json:"spines"`
	Bytes  []uint64 `json:"bytes"`
	// MostOverMean is the busiest uplink's bytes over the mean: 1 is an
	// even spread.
	MostOverMean float64 `json:"most_over_mean"`
}

// uplinkSpread sums the uplink ports of res of each switch of the fabric
// with more than one: a leaf-spine's leaves, a fat tree's ToRs and
// aggregation switches.
func (f *File) uplinkSpread(res *Result) []UplinkSpread {
	fb := f.Fabric
	if fb == nil {
		return nil
	}
	sent := map[string]uint64{}
	for _, p := range res.Ports {
		b := p.DequeuedPackets
		if p.Stats != nil {
			b = p.Stats.Total().DequeuedBytes
		}
		sent[p.Name] = b
	}
	var sws []fabricSwitch
	switch {
	case fb.Kind == FabricFatTree:
		sws = fb.fatTree().Uplinks()
	case fb.Spines >= 2:
		for l := range fb.Leaves {
			s := fabricSwitch{Name: fmt.Sprintf("leaf%d", l+1)}
			for sp := range fb.Spines {
				s.Up = append(s.Up, fmt.Sprintf("sp%d", sp+1))
			}
			sws = append(sws, s)
		}
	}
	var out []UplinkSpread
	for _, s := range sws {
		if len(s.Up) < 2 {
			continue // one uplink: nothing to spread over
		}
		u := UplinkSpread{Leaf: s.Name}
		var sum, most uint64
		for _, up := range s.Up {
			b, ok := sent[s.Name+":"+up]
			if !ok {
				return nil // a port not watched: no spread to show
			}
			u.Spines, u.Bytes = append(u.Spines, up), append(u.Bytes, b)
			sum, most = sum+b, max(most, b)
		}
		if sum > 0 {
			u.MostOverMean = float64(most) * float64(len(s.Up)) / float64(sum)
		}
		out = append(out, u)
	}
	return out
}

// gated says fr is a rocev2 or uet flow of the matrix, set up at the
// run's start and its data held until its time or its trigger: its
// setup (agent or endpoint, side channel, QPs or session: tens of ms
// on this host) is then off the collective's critical path, as in
// htsim, whose connections exist before they start.
func (mr *matrixRun) gated(fr *flowRun) bool { return mr != nil && isGated(fr) }

func isGated(fr *flowRun) bool { return fr.plan.Flow.conn > 0 && fr.plan.TCP == nil }

// flowGate holds a gated flow's data until it opens; finished is its
// end (perf's OnFinished).
type flowGate struct {
	open     chan struct{}
	ready    func()
	finished func()
}

// runGated runs a gated matrix flow: its setup now (ready is called
// once it is set up or has failed), its data when its start time comes
// or its trigger fires, its own triggers activated as its last byte is
// acknowledged.
func (r *runner) runGated(ctx context.Context, fr *flowRun, ready func()) {
	var readyOnce sync.Once
	began := time.Now()
	var setup time.Duration
	isReady := func() {
		readyOnce.Do(func() {
			setup = time.Since(began)
			ready()
		})
	}
	defer isReady()
	var size uint64
	if fr.sizes != nil {
		size = fr.sizes[0]
	}
	in := instanceRun{size: size}
	gate := &flowGate{open: make(chan struct{}), ready: isReady}
	var once sync.Once
	var finished atomic.Bool
	var dataEnd atomic.Int64
	gate.finished = func() {
		once.Do(func() {
			now := time.Since(r.matrix.clock())
			dataEnd.Store(int64(now))
			finished.Store(true)
			r.matrix.done(fr, now, nil)
		})
	}
	gctx, stopGate := context.WithCancel(ctx)
	defer stopGate()
	opened := make(chan struct{})
	go func() {
		defer close(opened)
		select {
		case <-gctx.Done():
			return
		case <-r.matrix.started:
		}
		t0 := r.matrix.t0
		var at time.Duration
		if fr.trigger != nil {
			select {
			case <-gctx.Done():
				return
			case at = <-fr.trigger:
			}
		} else {
			select {
			case <-gctx.Done():
				return
			case <-time.After(time.Until(t0.Add(fr.start))):
			}
			at = time.Since(t0)
		}
		in.start, in.dataStart, in.dataMono = at, at, hostlost.Now()
		fr.set(func(fr *flowRun) { fr.start, fr.state = at, stateRunning })
		close(gate.open)
	}()
	r.runInstance(ctx, time.Time{}, fr, &in, gate)
	isReady()
	stopGate()
	<-opened
	in.end = time.Since(r.matrix.clock())
	select {
	case <-gate.open:
	default:
		in.start = in.end // never opened: it sent nothing
	}
	in.dataEnd = time.Duration(dataEnd.Load())
	in.setup = setup
	fr.set(func(fr *flowRun) {
		fr.instances = append(fr.instances, in)
		fr.state = stateDone
		if in.err != nil {
			fr.state = stateFailed
		}
	})
	if in.err != nil {
		r.log.Warn("flow failed", "flow", fr.plan.Flow.Name, "err", in.err)
		if !finished.Load() { // its triggers already fired if its data did not fail
			r.matrix.done(fr, in.end, in.err)
		}
		return
	}
	gate.finished() // a run whose streams ended without OnFinished's call
}

// matrixResult sums the matrix's flows (res.Flows, filled).
func (r *runner) matrixResult(res *Result, flows []*flowRun) *MatrixResult {
	m := r.f.matrix
	if m == nil {
		return nil
	}
	w := r.f.Workload
	out := &MatrixResult{Source: w.CM, Nodes: m.Nodes, Connections: len(m.Conns), Triggers: len(m.Triggers)}
	if out.Source == "" {
		out.Source = w.Kind
	}
	sm := r.scaledMatrix()
	n := len(m.Conns)
	start, end := make([]time.Duration, n), make([]time.Duration, n)
	fct := make([]time.Duration, n)
	var ratios, setups []float64
	complete := true
	for i := range n {
		fr := flows[r.f.matrixFirst+i]
		fres := &res.Flows[r.f.matrixFirst+i]
		fr.mu.Lock()
		if len(fr.instances) == 1 && fr.instances[0].err == nil {
			in := fr.instances[0]
			start[i], end[i] = in.start, in.end
			if in.dataEnd > 0 {
				end[i] = in.dataEnd
			}
			setup := in.dataStart - in.start
			if in.setup > 0 {
				setup = in.setup
			}
			setups = append(setups, setup.Seconds())
		} else {
			complete = false
		}
		fr.mu.Unlock()
		if fres.FCTS > 0 {
			out.Completed++
			fct[i] = time.Duration(fres.FCTS * float64(time.Second))
			ratios = append(ratios, fres.FCTRatio)
		}
	}
	out.FCTRatio, out.SetupS = stats.Summarize(ratios), stats.Summarize(setups)
	out.Credit = credit(res.Servers)
	ideal := func(i int) (time.Duration, time.Duration) {
		fp := flows[r.f.matrixFirst+i].plan
		d := fp.IdealFCT(m.Conns[i].Size)
		return d, max(d-fp.BaseRTT/2, 0)
	}
	var measured func(i int) (time.Duration, time.Duration)
	if complete && out.Completed == n {
		measured = func(i int) (time.Duration, time.Duration) { return fct[i], fct[i] }
	}
	out.All, out.Groups = collectives(sm, start, end, complete, ideal, measured)
	out.Uplinks = r.f.uplinkSpread(res)
	return out
}

// writeMatrix prints the matrix's summary.
func (mr *MatrixResult) write(w io.Writer) {
	fmt.Fprintf(w, "\nmatrix %s: %d nodes, %d connections, %d triggers; %d completed\n", mr.Source, mr.Nodes, mr.Connections, mr.Triggers, mr.Completed)
	line := func(name string, c CollectiveResult) {
		if c.CCTS == 0 {
			fmt.Fprintf(w, "  %-10s %4d flows: incomplete\n", name, c.Flows)
			return
		}
		fmt.Fprintf(w, "  %-10s %4d flows: completion %.3f ms, ideal %.3f ms (%.3f ×); over the measured FCTs %.3f ms (%.3f ×)\n",
			name, c.Flows, 1e3*c.CCTS, 1e3*c.IdealCCTS, c.CCTRatio, 1e3*c.ReplayCCTS, c.ReplayRatio)
	}
	line("all", mr.All)
	for i, g := range mr.Groups {
		if i == 8 {
			fmt.Fprintf(w, "  … %d more groups in result.json\n", len(mr.Groups)-i)
			break
		}
		line(fmt.Sprintf("group %d", i+1), g)
	}
	if mr.FCTRatio.N > 0 {
		fmt.Fprintf(w, "  flows' FCT/ideal: p50 %.3f, p99 %.3f, max %.3f; setup per flow p50 %.2f ms, max %.2f ms\n",
			mr.FCTRatio.P50, mr.FCTRatio.P99, mr.FCTRatio.Max, 1e3*mr.SetupS.P50, 1e3*mr.SetupS.Max)
	}
	for _, u := range mr.Uplinks {
		var sum uint64
		for _, b := range u.Bytes {
			sum += b
		}
		fmt.Fprintf(w, "  %s's uplinks:", u.Leaf)
		for i, sp := range u.Spines {
			fmt.Fprintf(w, " %s %.0f%%", sp, 100*float64(u.Bytes[i])/float64(max(sum, 1)))
		}
		fmt.Fprintf(w, " of %.2f MB (busiest over mean %.2f)\n", float64(sum)/1e6, u.MostOverMean)
	}
	if c := mr.Credit; c != nil {
		fmt.Fprintf(w, "  RCCC credit: the receivers granted %.2f MB in %d grants, %d of them slow pulls (%.2f MB no sender asked for)\n",
			float64(c.GrantedBytes)/1e6, c.Grants, c.SlowPulls, float64(c.SlowPullBytes)/1e6)
	}
	mr.Htsim.write(w, mr)
}
