package daemon

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabriclab/fabriclab/host/conf"
	"github.com/fabriclab/fabriclab/host/labfile"
)

// LabCheck has the daemon judge its lab's flows as `fabriclab check
// -daemons` does (seed 000's three layers, labfile.Check): every Window
// it reads the counters of every node (its own in-process, the others'
// from their fabriclabd metrics), judges the window's difference, and
// exports the verdicts as metrics and /check. A verdict needs the whole
// loop (the switch's marks, the receiver's CNPs, the sender's cuts), so
// every other node of the file must be listed.
type LabCheck struct {
	// Daemons are the other nodes' metrics endpoints, NODE: HOST:PORT
	// (their metrics.listen, reachable from here). This node's own entry
	// is allowed and ignored: one list can serve every server.
	Daemons map[string]string `yaml:"daemons"`
	// Window is how much time each verdict judges. Default 10s.
	Window time.Duration `yaml:"window"`
	// Flows is own (default: the flows leaving this node, so that each
	// verdict is exported once across the lab) or all.
	Flows string `yaml:"flows"`
}

// Check window bounds, and the flows a daemon judges.
const (
	DefaultCheckWindow = 10 * time.Second
	MinCheckWindow     = time.Second
	MaxCheckWindow     = 5 * time.Minute
	CheckFlowsOwn      = "own"
	CheckFlowsAll      = "all"
)

func (lc LabCheck) withDefaults() LabCheck {
	lc.Window = cmp.Or(lc.Window, DefaultCheckWindow)
	lc.Flows = cmp.Or(lc.Flows, CheckFlowsOwn)
	return lc
}

// validate checks lc against the file the daemon runs a node of.
func (lc LabCheck) validate(f *labfile.File, node string) error {
	lc = lc.withDefaults()
	if lc.Window < MinCheckWindow || lc.Window > MaxCheckWindow {
		return conf.Errorf("lab.check.window", lc.Window, "must be %v..%v (default %v)", MinCheckWindow, MaxCheckWindow, DefaultCheckWindow)
	}
	if lc.Flows != CheckFlowsOwn && lc.Flows != CheckFlowsAll {
		return conf.Errorf("lab.check.flows", lc.Flows, "must be %s (the flows leaving this node, default) or %s", CheckFlowsOwn, CheckFlowsAll)
	}
	var others []string
	for _, n := range f.Nodes {
		if n.Name != node {
			others = append(others, n.Name)
		}
	}
	keys := make([]string, 0, len(lc.Daemons))
	for k := range lc.Daemons {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := "lab.check.daemons." + k
		if k != node && !slices.Contains(others, k) {
			return conf.Errorf(p, lc.Daemons[k], "not a node of %s (nodes: %s)", f.Path, strings.Join(append([]string{node}, others...), ", "))
		}
		host, port, err := net.SplitHostPort(lc.Daemons[k])
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return conf.Errorf(p, lc.Daemons[k], "must be HOST:PORT, the node's fabriclabd metrics.listen as reached from here (e.g. 192.168.56.12:9471)")
		}
	}
	for _, n := range others {
		if _, ok := lc.Daemons[n]; !ok {
			return conf.Errorf("lab.check.daemons", n, "missing: every other node of %s needs its fabriclabd's HOST:PORT (a verdict reads the whole loop: the switches' marks, the receiver's CNPs, the sender's cuts)", f.Path)
		}
	}
	return nil
}

// CheckState is the checker's last verdicts: /check serves it.
type CheckState struct {
	Node   string `json:"node"`
	Flows  string `json:"flows"` // own or all
	Window string `json:"window"`
	// At is when the last evaluation ended; Error why it failed (a
	// node's metrics unreachable, a lab file the counters do not fit):
	// its verdicts are then dropped, not kept stale.
	At          time.Time            `json:"at"`
	Evaluations uint64               `json:"evaluations"`
	Failures    uint64               `json:"failures"`
	Error       string               `json:"error,omitempty"`
	LastOK      time.Time            `json:"last_ok"`
	Report      *labfile.CheckReport `json:"report,omitempty"`
	// ScrapeSeconds is how long the last evaluation took to read each
	// node's counters.
	ScrapeSeconds map[string]float64 `json:"scrape_seconds"`
}

// checker judges the lab every window until stopped.
type checker struct {
	cfg           LabCheck
	file          *labfile.File
	node, variant string
	own           prometheus.Gatherer
	client        *http.Client
	ctx           context.Context // cancelled by close: a scrape in progress ends
	cancel        context.CancelFunc
	stop, done    chan struct{}

	mu    sync.Mutex
	state CheckState
}

// checkScrapeTimeout bounds a peer's /metrics.
const checkScrapeTimeout = 5 * time.Second

func newChecker(lc LabCheck, f *labfile.File, node, variant string, own prometheus.Gatherer) *checker {
	lc = lc.withDefaults()
	timeout := min(checkScrapeTimeout, lc.Window/2)
	ctx, cancel := context.WithCancel(context.Background())
	return &checker{cfg: lc, file: f, node: node, variant: variant, own: own, ctx: ctx, cancel: cancel,
		client: &http.Client{Timeout: timeout}, stop: make(chan struct{}), done: make(chan struct{}),
		state: CheckState{Node: node, Flows: lc.Flows, Window: lc.Window.String()}}
}

// run evaluates every window; the first verdicts come one window after
// the start (a window's difference needs two scrapes). A window whose
// start could not be read (a peer not up yet, or unreachable) is not
// judged: the next scrape starts the next window.
func (c *checker) run() {
	defer close(c.done)
	t := time.NewTicker(c.cfg.Window)
	defer t.Stop()
	prev, _ := c.scrapeAll()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		if c.ctx.Err() != nil {
			return // closed while the tick was due
		}
		cur, err := c.scrapeAll()
		if err == nil && prev == nil {
			prev = cur
			continue
		}
		var rep *labfile.CheckReport
		if err == nil {
			rep, err = c.judge(prev, cur)
		}
		prev = cur // nil after a failed scrape: the next window starts anew
		c.mu.Lock()
		c.state.Evaluations++
		c.state.At = time.Now()
		if err != nil {
			c.state.Failures++
			c.state.Error, c.state.Report = err.Error(), nil
		} else {
			c.state.Error, c.state.Report, c.state.LastOK = "", rep, c.state.At
		}
		c.mu.Unlock()
	}
}

// scrapeAll reads every node's metrics: nil and the first failure's error
// if any node's could not be read.
func (c *checker) scrapeAll() (map[string]Metrics, error) {
	by := map[string]Metrics{}
	secs := map[string]float64{}
	t0 := time.Now()
	mfs, err := c.own.Gather()
	if len(mfs) == 0 && err != nil {
		return nil, fmt.Errorf("node %s (this daemon): %w", c.node, err)
	}
	m := Metrics{}
	for _, mf := range mfs {
		m[mf.GetName()] = mf
	}
	by[c.node], secs[c.node] = m, time.Since(t0).Seconds()
	var failed error
	for node, addr := range c.cfg.Daemons {
		if node == c.node {
			continue
		}
		t0 := time.Now()
		m, err := c.scrape(addr)
		secs[node] = time.Since(t0).Seconds()
		if err != nil && failed == nil {
			failed = fmt.Errorf("node %s (%s): %w", node, addr, err)
		}
		by[node] = m
	}
	c.mu.Lock()
	c.state.ScrapeSeconds = secs
	c.mu.Unlock()
	if failed != nil {
		return nil, failed
	}
	return by, nil
}

func (c *checker) scrape(addr string) (Metrics, error) { return Scrape(c.ctx, c.client, addr) }

// Scrape reads a fabriclabd's /metrics at addr (HOST:PORT).
func Scrape(ctx context.Context, client *http.Client, addr string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return ParseMetrics(resp.Body)
}

// judge is the check of the window between two scrapes, the flows this
// daemon reports.
func (c *checker) judge(prev, cur map[string]Metrics) (*labfile.CheckReport, error) {
	res, err := JudgeDeployed(c.file, c.variant, prev, cur)
	if err != nil {
		return nil, err
	}
	rep := res.Check
	if c.cfg.Flows == CheckFlowsOwn {
		from := map[string]string{}
		for i := range res.Flows {
			from[res.Flows[i].Name] = res.Flows[i].From
		}
		rep.Flows = slices.DeleteFunc(rep.Flows, func(fc labfile.FlowCheck) bool { return from[fc.Flow] != c.node })
	}
	return rep, nil
}

// JudgeDeployed is the check (Result.Check) of a lab file's variant
// running on lab servers, from its daemons' metrics by node: of the
// window between two scrapes (Delta), or with before nil, of everything
// since each daemon started.
func JudgeDeployed(f *labfile.File, variant string, before, after map[string]Metrics) (*labfile.Result, error) {
	by := after
	if before != nil {
		by = map[string]Metrics{}
		for node, m := range after {
			by[node] = Delta(before[node], m)
		}
	}
	d, err := ReadDeployed(f, variant, by)
	if err != nil {
		return nil, err
	}
	return f.DeployedResult(variant, d)
}

// close stops the checker; wait waits for its goroutine (never under the
// daemon's lock: an evaluation gathers the daemon's own metrics).
func (c *checker) close() { c.cancel(); close(c.stop) }
func (c *checker) wait()  { <-c.done }

// State is the last evaluation.
func (c *checker) State() CheckState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// checkMetrics exports the checker's last verdicts:
//
//	fabriclab_check_verdict{flow,layer,kind,hop}  1, the flow's verdict
//	fabriclab_check_layer_silent{flow,layer}       1 if the verdict names the layer
//	fabriclab_check_evidence{flow,where,counter}   the counters it cites
//
// and the evaluations themselves. After a failed evaluation there are no
// verdicts: fabriclab_check_last_evaluation_successful is 0.
func checkMetrics(e *emitter, c *checker) {
	st := c.State()
	e.emit(ns+"_check_evaluations_total", prometheus.CounterValue, "windows the daemon judged (lab.check)", nil, nil, float64(st.Evaluations))
	e.emit(ns+"_check_failures_total", prometheus.CounterValue, "windows that could not be judged (a node's metrics unreachable, counters that do not fit the file)", nil, nil, float64(st.Failures))
	e.emit(ns+"_check_window_seconds", prometheus.GaugeValue, "the time each verdict judges (lab.check.window)", nil, nil, c.cfg.Window.Seconds())
	if st.Evaluations > 0 {
		e.emit(ns+"_check_last_evaluation_successful", prometheus.GaugeValue, "0 if the last window could not be judged (GET /check says why)", nil, nil, b2f(st.Error == ""))
	}
	if !st.LastOK.IsZero() {
		e.emit(ns+"_check_last_success_timestamp_seconds", prometheus.GaugeValue, "when the last verdicts were made", nil, nil, float64(st.LastOK.UnixNano())/1e9)
	}
	for node, s := range st.ScrapeSeconds {
		e.emit(ns+"_check_scrape_seconds", prometheus.GaugeValue, "how long the last evaluation took to read the node's counters", []string{"node"}, []string{node}, s)
	}
	if st.Report == nil {
		return
	}
	for _, f := range st.Report.Flows {
		e.emit(ns+"_check_verdict", prometheus.GaugeValue, "the flow's verdict over the last window (seed 000's three layers; layer is the silent one, empty when none)",
			[]string{"flow", "layer", "kind", "hop"}, []string{f.Flow, string(f.Layer), f.Kind, f.Hop}, 1)
		if f.Kind == labfile.CheckNotJudged {
			continue // 0 for every layer would read as "none silent"
		}
		for _, l := range []labfile.Layer{labfile.LayerCP, labfile.LayerPath, labfile.LayerNP, labfile.LayerRP} {
			e.emit(ns+"_check_layer_silent", prometheus.GaugeValue, "1 if the flow's verdict over the last window names the layer silent",
				[]string{"flow", "layer"}, []string{f.Flow, string(l)}, b2f(f.Layer == l))
		}
		seen := map[string]bool{}
		for _, ev := range f.Evidence {
			k := ev.Where + "|" + ev.Counter
			if seen[k] {
				continue // one series per counter: a verdict may cite one twice
			}
			seen[k] = true
			e.emit(ns+"_check_evidence", prometheus.GaugeValue, "a counter the flow's verdict cites, over the last window",
				[]string{"flow", "where", "counter"}, []string{f.Flow, ev.Where, ev.Counter}, float64(ev.Value))
		}
	}
}
