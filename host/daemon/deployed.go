package daemon

import (
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/labfile"
	"github.com/fabriclab/fabriclab/qdisc"
)

// Metrics are one daemon's metric families by name: a scrape of its
// /metrics.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics reads a scrape of /metrics (Prometheus' text format).
func ParseMetrics(r io.Reader) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("daemon: metrics: %w", err)
	}
	return mf, nil
}

// ReadDeployed reads what the daemons running a lab file's nodes report
// (metrics by node) back into the counters labfile.Check judges: each
// port's class counters, each rocev2 flow's QPs at its sender (the QPs
// named by the flow) and at its receiver (its server's QPs whose peer is
// the sender and whose peer QPN is one of the flow's). The metrics are the
// names collector gives the same structs. A node missing from byNode is
// an error naming it.
func ReadDeployed(f *labfile.File, variant string, byNode map[string]Metrics) (labfile.Deployed, error) {
	d := labfile.Deployed{Ports: map[string]*qdisc.Stats{}, Senders: map[string]agent.Counters{}, Receivers: map[string]agent.Counters{}}
	flows, ports, err := f.DeployedFlows(variant)
	if err != nil {
		return d, err
	}
	node := func(n string) (Metrics, error) {
		m, ok := byNode[n]
		if !ok {
			return nil, fmt.Errorf("daemon: no metrics of node %s (a fabriclabd running it)", n)
		}
		return m, nil
	}
	for _, pp := range ports {
		m, err := node(pp.Node)
		if err != nil {
			return d, err
		}
		label := describePort(PortConfig{Dev: pp.Dev})
		st := &qdisc.Stats{Classes: make([]qdisc.ClassStats, qdisc.NumClasses)}
		seen := false
		for c := range st.Classes {
			cs := &st.Classes[c]
			cs.Class = qdisc.ClassID(c)
			want := map[string]string{"port": label, "class": strconv.Itoa(c)}
			if readFields("port", m, want, reflect.ValueOf(cs).Elem(), "") {
				seen = true
			}
			readSojourn(m, want, cs)
		}
		if seen {
			d.Ports[pp.Name] = st
		}
	}
	for _, fl := range flows {
		sm, err := node(fl.From)
		if err != nil {
			return d, err
		}
		rm, err := node(fl.To)
		if err != nil {
			return d, err
		}
		var snd, rcv agent.Counters
		if readFields("qp", sm, map[string]string{"flow": fl.Name}, reflect.ValueOf(&snd).Elem(), "") {
			d.Senders[fl.Name] = snd
		}
		qpns := labelValues(sm, "fabriclab_qp_tx_packets_total", map[string]string{"flow": fl.Name}, "qpn")
		server := (ServerConfig{Transport: labfile.TransportRoCEv2, Bind: fl.Server.Addr(), Port: int(fl.Server.Port())}).name()
		// The server's QPs whose peer is one of the flow's, picked in one
		// pass over its series (not a pass per QP), then summed.
		if mine := serverQPs(rm, server, fl.Sender.String(), qpns); len(mine) > 0 &&
			readFields("qp", mine, map[string]string{"server": server}, reflect.ValueOf(&rcv).Elem(), "") {
			d.Receivers[fl.Name] = rcv
		}
	}
	return d, nil
}

// serverQPs is m's qp families cut to the series of server whose peer is
// peer and whose peer QPN is one of qpns.
func serverQPs(m Metrics, server, peer string, qpns []string) Metrics {
	want := map[string]bool{}
	for _, q := range qpns {
		want[q] = true
	}
	out := Metrics{}
	for name, f := range m {
		if !strings.HasPrefix(name, ns+"_qp_") {
			continue
		}
		nf := &dto.MetricFamily{Name: f.Name, Help: f.Help, Type: f.Type}
		for _, s := range f.Metric {
			var srv, p, pq string
			for _, l := range s.Label {
				switch l.GetName() {
				case "server":
					srv = l.GetValue()
				case "peer":
					p = l.GetValue()
				case "peer_qpn":
					pq = l.GetValue()
				}
			}
			if srv == server && p == peer && want[pq] {
				nf.Metric = append(nf.Metric, s)
			}
		}
		if len(nf.Metric) > 0 {
			out[name] = nf
		}
	}
	return out
}

// readFields sets v's numbers (walk's fields, by their metric names) to
// the sum of the series of m whose labels include want; it says whether
// any series matched.
func readFields(scope string, m Metrics, want map[string]string, v reflect.Value, prefix string) bool {
	found := false
	for _, f := range reportFields(v.Type()) {
		fv := v.Field(f.index)
		if f.embedded {
			found = readFields(scope, m, want, fv, prefix) || found
			continue
		}
		name := prefix + f.name
		if _, ok := want[name]; ok {
			continue // a label, not a quantity
		}
		switch fv.Kind() {
		case reflect.Struct:
			if fv.Type() != reflect.TypeFor[time.Time]() {
				found = readFields(scope, m, want, fv, name+"_") || found
			}
			continue
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Int, reflect.Int64:
		default:
			continue
		}
		if fv.Type().Implements(textMarshaler) {
			continue
		}
		full, scale := metricName(scope, name, isGauge(name))
		x, ok := sum(m, full, want)
		if !ok {
			continue
		}
		found = true
		x /= scale
		if fv.CanUint() {
			fv.SetUint(uint64(math.Round(x)))
		} else {
			fv.SetInt(int64(math.Round(x)))
		}
	}
	return found
}

// sum adds up the series of the family name whose labels include want.
func sum(m Metrics, name string, want map[string]string) (float64, bool) {
	f, ok := m[name]
	if !ok {
		return 0, false
	}
	var x float64
	found := false
	for _, s := range f.Metric {
		if !matches(s, want) {
			continue
		}
		found = true
		switch {
		case s.Counter != nil:
			x += s.Counter.GetValue()
		case s.Gauge != nil:
			x += s.Gauge.GetValue()
		}
	}
	return x, found
}

func matches(s *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		if !slices.ContainsFunc(s.Label, func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
			return false
		}
	}
	return true
}

// labelValues lists the values of label key on the series of name whose
// labels include want.
func labelValues(m Metrics, name string, want map[string]string, key string) []string {
	var out []string
	if f, ok := m[name]; ok {
		for _, s := range f.Metric {
			if !matches(s, want) {
				continue
			}
			for _, l := range s.Label {
				if l.GetName() == key && !slices.Contains(out, l.GetValue()) {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	return out
}

// readSojourn rebuilds a class's log2 sojourn histogram from
// fabriclab_port_sojourn_seconds (portMetrics: bucket b's upper bound is
// 2^(b+1) ns, cumulative).
func readSojourn(m Metrics, want map[string]string, cs *qdisc.ClassStats) {
	f, ok := m[ns+"_port_sojourn_seconds"]
	if !ok {
		return
	}
	for _, s := range f.Metric {
		if !matches(s, want) || s.Histogram == nil {
			continue
		}
		var prev uint64
		for _, b := range s.Histogram.Bucket {
			ub := b.GetUpperBound()
			if math.IsInf(ub, 0) || ub <= 0 {
				continue
			}
			i := int(math.Round(math.Log2(ub*1e9))) - 1
			if i < 0 || i >= len(cs.Sojourn) {
				continue
			}
			cs.Sojourn[i] = b.GetCumulativeCount() - prev
			prev = b.GetCumulativeCount()
		}
	}
}

// Delta is what happened between two scrapes of one daemon: each counter
// series of after less its value in before (all of it where before has
// none, or where the counter went back: a restart), histograms likewise
// bucket by bucket, gauges as after holds them; a maximum since the start
// (a gauge with "max" in its name) says nothing of the window and is left
// out. fabriclab check -daemons judges a window so that every counter it
// compares covers the same time: a port attached after a flow started, or
// a daemon restarted, would otherwise set counters of different ages side
// by side.
func Delta(before, after Metrics) Metrics {
	out := Metrics{}
	for name, fa := range after {
		if fa.GetType() == dto.MetricType_GAUGE && strings.Contains(name, "max") {
			continue
		}
		// Before's series by their labels: a family has a series per QP,
		// and pairing them by a scan was quadratic (1,000 QPs: 0.1 s a
		// family, seconds a window in a daemon's lab check).
		var byLabels map[string]*dto.Metric
		if fb := before[name]; fb != nil {
			byLabels = make(map[string]*dto.Metric, len(fb.Metric))
			for _, m := range fb.Metric {
				byLabels[labelKey(m)] = m
			}
		}
		nf := &dto.MetricFamily{Name: fa.Name, Help: fa.Help, Type: fa.Type}
		for _, ma := range fa.Metric {
			nf.Metric = append(nf.Metric, deltaMetric(byLabels[labelKey(ma)], ma))
		}
		out[name] = nf
	}
	return out
}

// labelKey is a series' labels as one string, in name order.
func labelKey(m *dto.Metric) string {
	ls := slices.Clone(m.Label)
	slices.SortFunc(ls, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.GetName())
		b.WriteByte(0)
		b.WriteString(l.GetValue())
		b.WriteByte(0)
	}
	return b.String()
}

// deltaMetric is ma less mb (nil: nothing before).
func deltaMetric(mb, ma *dto.Metric) *dto.Metric {
	if mb == nil {
		return ma
	}
	switch {
	case ma.Counter != nil && mb.Counter != nil:
		d := ma.Counter.GetValue() - mb.Counter.GetValue()
		if d < 0 {
			return ma // reset: all of after is new
		}
		return &dto.Metric{Label: ma.Label, Counter: &dto.Counter{Value: &d}}
	case ma.Histogram != nil && mb.Histogram != nil:
		ha, hb := ma.Histogram, mb.Histogram
		if ha.GetSampleCount() < hb.GetSampleCount() {
			return ma
		}
		n, s := ha.GetSampleCount()-hb.GetSampleCount(), ha.GetSampleSum()-hb.GetSampleSum()
		h := &dto.Histogram{SampleCount: &n, SampleSum: &s}
		for i, b := range ha.Bucket {
			c := b.GetCumulativeCount()
			if i < len(hb.Bucket) && hb.Bucket[i].GetUpperBound() == b.GetUpperBound() {
				c -= hb.Bucket[i].GetCumulativeCount()
			}
			h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: b.UpperBound, CumulativeCount: &c})
		}
		return &dto.Metric{Label: ma.Label, Histogram: h}
	}
	return ma
}
