package labfile

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/fabriclab/fabriclab/host/conf"
	"github.com/fabriclab/fabriclab/host/lab/stats"
)

// Goal is what a comparison is run to show, checked on its summary: a
// metric of one variant, alone (min, max: bounds on its mean over the
// runs) or against another variant's (change_min, change_max: bounds on
// variant / than − 1, run by run where both ran every run). The verdicts
// are reported, not enforced: a goal not met is a finding, not an error.
type Goal struct {
	Name    string `yaml:"name"`
	Variant string `yaml:"variant"`
	// Than is the variant compared with. Optional: the goal bounds
	// Variant's metric alone.
	Than string `yaml:"than"`
	// Metric is one of GoalMetrics: a port's (Port), a flow group's
	// (Flows), a tunnel PE's (Node) or the variant's.
	Metric string `yaml:"metric"`
	Port   string `yaml:"port"`
	Flows  string `yaml:"flows"`
	Node   string `yaml:"node"`
	// Bounds in the metric's unit (fractions for utilization and shares,
	// bytes, µs, bits/s, seconds), and for Than as a fraction: -0.5 is
	// "half of than's".
	Min       *float64 `yaml:"min"`
	Max       *float64 `yaml:"max"`
	ChangeMin *float64 `yaml:"change_min"`
	ChangeMax *float64 `yaml:"change_max"`
}

// goalMetric reads a metric from a variant's summary; scope says what
// names the part it is of.
type goalMetric struct {
	scope string // "port", "flows", "pe" or "" (the variant)
	unit  string // how the measured figure prints
	port  func(*PortSummary) stats.Stat
	flows func(*FlowSummary) stats.Stat
	pe    func(*PESummary) stats.Stat
	whole func(*VariantSummary) stats.Stat
}

// goalMetrics are the metrics a goal may bound, by name.
var goalMetrics = map[string]goalMetric{
	"utilization":       {scope: "port", unit: "%", port: func(p *PortSummary) stats.Stat { return p.Utilization }},
	"mean_wait_us":      {scope: "port", unit: "us", port: func(p *PortSummary) stats.Stat { return p.MeanSojournUS }},
	"queue_mean_bytes":  {scope: "port", unit: "B", port: func(p *PortSummary) stats.Stat { return p.QueueMeanBytes }},
	"queue_p50_bytes":   {scope: "port", unit: "B", port: func(p *PortSummary) stats.Stat { return p.QueueP50Bytes }},
	"queue_p99_bytes":   {scope: "port", unit: "B", port: func(p *PortSummary) stats.Stat { return p.QueueP99Bytes }},
	"marked_fraction":   {scope: "port", unit: "%", port: func(p *PortSummary) stats.Stat { return p.MarkedFraction }},
	"dropped_packets":   {scope: "port", unit: "", port: func(p *PortSummary) stats.Stat { return p.Dropped }},
	"max_backlog_bytes": {scope: "port", unit: "B", port: func(p *PortSummary) stats.Stat { return p.MaxBacklog }},
	"goodput_bps":       {scope: "flows", unit: "bps", flows: func(f *FlowSummary) stats.Stat { return f.GoodputBps }},
	"fct_ratio":         {scope: "flows", unit: "x", flows: func(f *FlowSummary) stats.Stat { return f.FCTRatio }},
	"fct_mean_s":        {scope: "flows", unit: "s", flows: func(f *FlowSummary) stats.Stat { return f.FCTMeanS }},
	"fct_p99_s":         {scope: "flows", unit: "s", flows: func(f *FlowSummary) stats.Stat { return f.FCTP99S }},
	"fct_ratio_p99":     {scope: "flows", unit: "x", flows: func(f *FlowSummary) stats.Stat { return f.RatioP99 }},
	"qct_p99_s":         {scope: "flows", unit: "s", flows: func(f *FlowSummary) stats.Stat { return f.QCTP99S }},
	"pe_reaction_ms":    {scope: "pe", unit: "ms", pe: func(p *PESummary) stats.Stat { return p.FirstReactionMS }},
	"lost_packets":      {unit: "", whole: func(v *VariantSummary) stats.Stat { return v.Lost }},
	"cnps_sent":         {unit: "", whole: func(v *VariantSummary) stats.Stat { return v.CNPsSent }},
	"cnps_unanswered":   {unit: "", whole: func(v *VariantSummary) stats.Stat { return v.CNPsUnanswered }},
	"jain":              {unit: "index", whole: func(v *VariantSummary) stats.Stat { return v.Jain }},
	"e2e_reaction_ms":   {unit: "ms", whole: func(v *VariantSummary) stats.Stat { return v.E2EReactionMS }},
	"host_lost_share":   {unit: "%", whole: func(v *VariantSummary) stats.Stat { return v.HostLostShare }},
}

// GoalMetricNames are the metrics a goal may name, sorted.
func GoalMetricNames() []string {
	names := make([]string, 0, len(goalMetrics))
	for n := range goalMetrics {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// checkGoals validates f.Goals against the plan: the variants, the ports
// and the flow groups they name. The plan's ports and groups are the
// file's, which every variant shares.
func (f *File) checkGoals(p *Plan) error {
	variants := f.VariantNames()
	// A variant may add a port (a PE's limiter): a goal may name it.
	watched := map[string]bool{}
	for _, pl := range append([]*Plan{p}, variantPlans(p)...) {
		for _, pp := range pl.Ports {
			watched[pp.Name] = watched[pp.Name] || pp.Watch
		}
	}
	names := map[string]bool{}
	for i, g := range f.Goals {
		gp := func(field string) string { return conf.Join(conf.Index("goals", i), field) }
		switch {
		case g.Name == "":
			return conf.Errorf(gp("name"), "", "required: what the goal is, e.g. \"queue p99 halved\"")
		case names[g.Name]:
			return conf.Errorf(gp("name"), g.Name, "two goals have this name")
		}
		names[g.Name] = true
		if len(variants) == 0 {
			// A file without variants: its goals bound its own runs.
			if g.Variant != "" {
				return conf.Errorf(gp("variant"), g.Variant, "the file has no variants: leave variant out (the goal bounds the file's runs)")
			}
			if g.Than != "" {
				return conf.Errorf(gp("than"), g.Than, "the file has no variants to compare with: leave than out")
			}
		} else if !slices.Contains(variants, g.Variant) {
			return conf.Errorf(gp("variant"), g.Variant, "must be one of the file's variants (%s)", strings.Join(variants, ", "))
		}
		if g.Than != "" && (g.Than == g.Variant || !slices.Contains(variants, g.Than)) {
			return conf.Errorf(gp("than"), g.Than, "must be another of the file's variants (%s)", strings.Join(variants, ", "))
		}
		m, ok := goalMetrics[g.Metric]
		if !ok {
			return conf.Errorf(gp("metric"), g.Metric, "must be one of %s", strings.Join(GoalMetricNames(), ", "))
		}
		switch m.scope {
		case "port":
			if !watched[g.Port] {
				return conf.Errorf(gp("port"), g.Port, "a %s goal needs a watched port of the file (node:dev)", g.Metric)
			}
		case "flows":
			if !slices.ContainsFunc(p.Flows, func(fp FlowPlan) bool { return fp.Flow.Group == g.Flows }) {
				return conf.Errorf(gp("flows"), g.Flows, "a %s goal needs a flow group (a group: or a flow's name)", g.Metric)
			}
		case "pe":
			if !slices.ContainsFunc(p.PEs, func(pp PEPlan) bool { return pp.Node == g.Node }) {
				return conf.Errorf(gp("node"), g.Node, "a %s goal needs a pe node of the file", g.Metric)
			}
		}
		if m.scope != "pe" && g.Node != "" {
			return conf.Errorf(gp("node"), g.Node, "only with a pe's metric")
		}
		if m.scope != "port" && g.Port != "" {
			return conf.Errorf(gp("port"), g.Port, "only with a port's metric")
		}
		if m.scope != "flows" && g.Flows != "" {
			return conf.Errorf(gp("flows"), g.Flows, "only with a flow group's metric")
		}
		bounds := g.Min != nil || g.Max != nil
		changes := g.ChangeMin != nil || g.ChangeMax != nil
		switch {
		case g.Than == "" && changes:
			return conf.Errorf(gp("change_min"), "", "change_min and change_max need than: the variant compared with")
		case g.Than != "" && bounds:
			return conf.Errorf(gp("min"), "", "with than, bound the change (change_min, change_max), not the value")
		case !bounds && !changes:
			return conf.Errorf(gp("max"), "", "required: a bound (min or max; with than, change_min or change_max)")
		}
		for _, b := range []struct {
			field string
			v     *float64
		}{{"min", g.Min}, {"max", g.Max}, {"change_min", g.ChangeMin}, {"change_max", g.ChangeMax}} {
			if b.v != nil && (math.IsNaN(*b.v) || math.IsInf(*b.v, 0)) {
				return conf.Errorf(gp(b.field), *b.v, "must be a number")
			}
		}
	}
	return nil
}

func variantPlans(p *Plan) []*Plan {
	out := make([]*Plan, len(p.Variants))
	for i := range p.Variants {
		out[i] = p.Variants[i].Plan
	}
	return out
}

// GoalResult is a goal checked on a comparison.
type GoalResult struct {
	Goal string `json:"goal"`
	Want string `json:"want"`
	// Measured is the mean over the runs (of the change, with than) and
	// its 95 % CI; Evaluated is false when a variant had no run.
	Measured  stats.Stat `json:"measured"`
	Text      string     `json:"text"`
	Evaluated bool       `json:"evaluated"`
	Met       bool       `json:"met"`
}

// evalGoals checks goals on the comparison's summaries.
func evalGoals(goals []Goal, sums []VariantSummary) []GoalResult {
	var out []GoalResult
	find := func(name string) *VariantSummary {
		for i := range sums {
			if sums[i].Name == name {
				return &sums[i]
			}
		}
		return nil
	}
	for _, g := range goals {
		m := goalMetrics[g.Metric]
		gr := GoalResult{Goal: g.Name, Want: g.want()}
		read := func(v *VariantSummary) (stats.Stat, bool) {
			if v == nil || v.Runs == 0 {
				return stats.Stat{}, false
			}
			switch m.scope {
			case "port":
				for i := range v.Ports {
					if v.Ports[i].Name == g.Port {
						return m.port(&v.Ports[i]), true
					}
				}
				return stats.Stat{}, false
			case "flows":
				for i := range v.Flows {
					if v.Flows[i].Name == g.Flows {
						return m.flows(&v.Flows[i]), true
					}
				}
				return stats.Stat{}, false
			case "pe":
				for i := range v.PEs {
					if v.PEs[i].Node == g.Node {
						return m.pe(&v.PEs[i]), true
					}
				}
				return stats.Stat{}, false
			}
			return m.whole(v), true
		}
		a, ok := read(find(g.Variant))
		if !ok || a.N == 0 {
			gr.Text = "no run of " + orName(g.Variant, "the file")
			out = append(out, gr)
			continue
		}
		if g.Than == "" {
			gr.Measured, gr.Evaluated = a, true
			gr.Met = (g.Min == nil || a.Mean >= *g.Min) && (g.Max == nil || a.Mean <= *g.Max)
			gr.Text = measuredText(a, m.unit)
			out = append(out, gr)
			continue
		}
		b, ok := read(find(g.Than))
		if !ok || b.N == 0 {
			gr.Text = "no run of " + g.Than
			out = append(out, gr)
			continue
		}
		c := change(a, b)
		if c.N == 0 {
			gr.Text = fmt.Sprintf("%s's mean is 0: no change to measure", g.Than)
			out = append(out, gr)
			continue
		}
		gr.Measured, gr.Evaluated = c, true
		gr.Met = (g.ChangeMin == nil || c.Mean >= *g.ChangeMin) && (g.ChangeMax == nil || c.Mean <= *g.ChangeMax)
		gr.Text = fmt.Sprintf("%+.1f%% (%s %s, %s %s)", 100*c.Mean, g.Variant, measuredText(a, m.unit), g.Than, measuredText(b, m.unit))
		if !math.IsNaN(c.CI95) {
			gr.Text = fmt.Sprintf("%+.1f%% (95%% CI %+.1f to %+.1f%%; %s %s, %s %s)", 100*c.Mean, 100*c.Lo(), 100*c.Hi(),
				g.Variant, measuredText(a, m.unit), g.Than, measuredText(b, m.unit))
		}
		out = append(out, gr)
	}
	return out
}

// change is a / b − 1 over the runs: run by run when both have a value
// for every run (each pair ran back to back, comparisons interleave
// them), else of the means (one value, no CI).
func change(a, b stats.Stat) stats.Stat {
	if len(a.Values) == len(b.Values) && len(a.Values) > 1 {
		var xs []float64
		for i := range a.Values {
			if b.Values[i] != 0 && !math.IsNaN(a.Values[i]) && !math.IsNaN(b.Values[i]) {
				xs = append(xs, a.Values[i]/b.Values[i]-1)
			}
		}
		if len(xs) == len(a.Values) {
			return stats.NewStat(xs)
		}
	}
	if b.Mean == 0 {
		return stats.Stat{}
	}
	return stats.NewStat([]float64{a.Mean/b.Mean - 1})
}

func (g *Goal) String() string { return g.Name + ": " + g.want() }

// want is the goal's bounds in words.
func (g *Goal) want() string {
	var parts []string
	pct := func(v float64) string { return fmt.Sprintf("%+.0f%%", 100*v) }
	what := g.Metric
	if g.Port != "" {
		what += " at " + g.Port
	}
	if g.Flows != "" {
		what += " of " + g.Flows
	}
	if g.Node != "" {
		what += " of pe " + g.Node
	}
	if g.Than != "" {
		if g.ChangeMin != nil {
			parts = append(parts, "at least "+pct(*g.ChangeMin))
		}
		if g.ChangeMax != nil {
			parts = append(parts, "at most "+pct(*g.ChangeMax))
		}
		return fmt.Sprintf("%s: %s %s against %s", what, g.Variant, strings.Join(parts, " and "), g.Than)
	}
	unit := goalMetrics[g.Metric].unit
	if g.Min != nil {
		parts = append(parts, ">= "+boundValue(unit, *g.Min))
	}
	if g.Max != nil {
		parts = append(parts, "<= "+boundValue(unit, *g.Max))
	}
	if g.Variant == "" {
		return fmt.Sprintf("%s %s (mean over the runs)", what, strings.Join(parts, " and "))
	}
	return fmt.Sprintf("%s of %s %s (mean over the runs)", what, g.Variant, strings.Join(parts, " and "))
}

// boundValue is a goal's bound as the measured figure prints: bytes in
// KB, fractions in percent, bits/s in Mbit/s; others as written.
func boundValue(unit string, v float64) string {
	switch unit {
	case "B":
		return fmt.Sprintf("%gKB", v/1e3)
	case "%":
		return fmt.Sprintf("%g%%", 100*v)
	case "bps":
		return fmt.Sprintf("%gMb/s", v/1e6)
	}
	return fmt.Sprintf("%g", v)
}

// measuredText is a mean ± CI in the metric's unit.
func measuredText(s stats.Stat, unit string) string {
	switch unit {
	case "%":
		return statText(s, 100, "%.1f%%")
	case "B":
		return statText(s, 1e-3, "%.1fKB")
	case "us":
		return statText(s, 1, "%.0fus")
	case "bps":
		return statText(s, 1e-6, "%.1fMb/s")
	case "s":
		return statText(s, 1e3, "%.1fms")
	case "ms":
		return statText(s, 1, "%.2fms")
	case "x":
		return statText(s, 1, "%.2fx")
	case "index":
		return statText(s, 1, "%.3f")
	}
	return statText(s, 1, "%.0f")
}

// writeGoals prints the goals' verdicts.
func writeGoals(w io.Writer, goals []GoalResult) {
	if len(goals) == 0 {
		return
	}
	fmt.Fprintln(w, "goals (reported, not enforced):")
	for _, g := range goals {
		verdict := "not evaluated"
		switch {
		case g.Evaluated && g.Met:
			verdict = "met"
		case g.Evaluated:
			verdict = "NOT MET"
		}
		fmt.Fprintf(w, "  %-14s %s\n  %-14s want %s\n  %-14s measured %s\n", verdict, g.Goal, "", g.Want, "", g.Text)
	}
}

// runGoals are f's goals a single run of variant ("": the file as
// written) decides alone (no than), evaluated on res.
func (f *File) runGoals(variant string, res *Result) []GoalResult {
	var gs []Goal
	for _, g := range f.Goals {
		if g.Than == "" && g.Variant == variant {
			gs = append(gs, g)
		}
	}
	if len(gs) == 0 {
		return nil
	}
	return evalGoals(gs, []VariantSummary{summarize(variant, []*Result{res}, 1)})
}
