package daemon

import (
	"encoding"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabriclab/fabriclab/host/agent"
	peagent "github.com/fabriclab/fabriclab/host/pe"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/dispatch"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
)

// Metric names are fabriclab_<scope>_<counter>, where the counter is the
// name the JSON reports and portctl print, the NIC's own for a QP
// (mlx5's np_cnp_sent, rp_cnp_handled, out_of_sequence, ...): one name
// per counter everywhere. Counters end in _total; a report's nanoseconds
// (sojourn_sum_ns) are seconds (sojourn_sum_seconds_total); a maximum is
// a gauge.
//
//	fabriclab_qp_*        per QP: labels server or flow, qpn, peer
//	fabriclab_rocev2_*    per RoCEv2 agent (a server's, a flow's): the
//	                      QP counters summed, never going back, and drops
//	                      no QP could be charged with (icrc_errors, ...)
//	fabriclab_uet_*       per UET endpoint
//	fabriclab_pdc_*       per PDC: a UET server's targets (server, src,
//	                      spdcid, pdc, job_id), a UET flow's senders (flow, pdc)
//	fabriclab_ccc_*       per sender CCC of a UET flow: cwnd, in flight
//	fabriclab_port_*      per switch port class: port, class, name; port-
//	                      wide counters (packets by kind, notifications
//	                      not sent) and the rate: port; a shaped port's
//	                      HTB queue: fabriclab_port_shaper_*
//	fabriclab_flow_*      per configured flow (a tcp flow's: flow_tcp_*);
//	                      fct_seconds and fct_ideal_ratio are histograms
//	fabriclab_server_*    per server's side channel
//	fabriclab_tcp_server_* per tcp server (a lab file's kernel TCP sink)
//	fabriclab_tunnel_*    per tunnel PE of a lab file's node: dev
//	fabriclab_port_attached, fabriclab_tunnel_pe_attached and their
//	                      device_lost, reattached, reattach_failures: the
//	                      device watch (devwatch.go)
//	fabriclab_pe_agent_*  per PE agent: dev, mode; reaction_seconds is a
//	                      histogram
//	fabriclab_check_*     the lab check's verdicts (lab.check, check.go)
//	fabriclab_config_*    reloads
//	fabriclab_xmit_dispatcher_* the machine's xmit dispatcher, with any
//	                      port: its slots and empty-slot events
const ns = "fabriclab"

// collector builds every metric at scrape time from the live objects.
type collector struct{ d *Daemon }

var _ prometheus.Collector = collector{}

// Describe sends nothing: the metric set follows the configuration (an
// unchecked collector).
func (collector) Describe(chan<- *prometheus.Desc) {}

// emitter turns struct fields into const metrics.
type emitter struct {
	ch    chan<- prometheus.Metric
	descs map[string]*prometheus.Desc
}

func (e *emitter) emit(name string, kind prometheus.ValueType, help string, labels []string, values []string, v float64) {
	key := name + "|" + strings.Join(labels, ",")
	desc, ok := e.descs[key]
	if !ok {
		desc = prometheus.NewDesc(name, help, labels, nil)
		e.descs[key] = desc
	}
	m, err := prometheus.NewConstMetric(desc, kind, v, values...)
	if err == nil {
		e.ch <- m
	}
}

// gaugeFields are the fields that go up and down (levels, not events).
func isGauge(field string) bool {
	for _, s := range []string{"backlog", "in_flight", "cwnd", "depth", "reo_wnd", "credit", "sessions", "conns", "qps", "buffer_bytes", "window", "max"} {
		if strings.Contains(field, s) {
			return true
		}
	}
	return false
}

// fields emits every number of the struct v (by its json tags, nested
// structs prefixed), as scope's metrics. Maps of string to uint64 become
// one metric with the key as label key.
func (e *emitter) fields(scope string, v any, labels, values []string) {
	e.walk(scope, "", reflect.ValueOf(v), labels, values)
}

func (e *emitter) walk(scope, prefix string, v reflect.Value, labels, values []string) {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	for _, f := range reportFields(v.Type()) {
		fv := v.Field(f.index)
		if f.embedded {
			e.walk(scope, prefix, fv, labels, values)
			continue
		}
		name := prefix + f.name
		switch fv.Kind() {
		case reflect.Struct:
			if fv.Type() == reflect.TypeFor[time.Time]() {
				continue
			}
			e.walk(scope, name+"_", fv, labels, values)
		case reflect.Pointer:
			if !fv.IsNil() && fv.Elem().Kind() == reflect.Struct {
				e.walk(scope, name+"_", fv.Elem(), labels, values)
			}
		case reflect.Map:
			if fv.Type().Key().Kind() != reflect.String || !isUint(fv.Type().Elem().Kind()) {
				continue
			}
			it := fv.MapRange()
			for it.Next() {
				e.number(scope, name, it.Value(), append(labels, "key"), append(values, it.Key().String()))
			}
		default:
			e.number(scope, name, fv, labels, values)
		}
	}
}

// reportField is a struct field as the JSON reports name it: its json
// tag's name, or its own in lower case; an untagged embedded struct's
// fields are its parent's.
type reportField struct {
	index    int
	name     string
	embedded bool
}

// reportFields lists t's exported fields the JSON reports carry (not
// json:"-").
func reportFields(t reflect.Type) []reportField {
	var out []reportField
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == "-":
			continue
		case f.Anonymous && tag == "":
			out = append(out, reportField{index: i, embedded: true})
			continue
		case tag == "":
			tag = strings.ToLower(f.Name)
		}
		out = append(out, reportField{index: i, name: tag})
	}
	return out
}

func isUint(k reflect.Kind) bool {
	switch k {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

var textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()

func (e *emitter) number(scope, name string, fv reflect.Value, labels, values []string) {
	// A field that is a label already (a PDC's pdc, a CCC's tc) or an
	// enum that prints as a name (a CCC's state) is not a quantity.
	if slices.Contains(labels, name) || fv.Type().Implements(textMarshaler) {
		return
	}
	var x float64
	switch fv.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		x = float64(fv.Uint())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		x = float64(fv.Int())
	case reflect.Float32, reflect.Float64:
		x = fv.Float()
	case reflect.Bool:
		if fv.Bool() {
			x = 1
		}
	default:
		return // strings, arrays (histograms are emitted apart)
	}
	gauge := isGauge(name) || fv.Kind() == reflect.Bool || fv.Kind() == reflect.Float64
	full, scale := metricName(scope, name, gauge)
	kind := prometheus.CounterValue
	if gauge {
		kind = prometheus.GaugeValue
	}
	e.emit(full, kind, scope+" "+name+" (as in the JSON reports)", labels, values, x*scale)
}

// metricName is the name of scope's field name (its JSON tag, nested
// structs prefixed) and the factor its value is multiplied by: base
// units (promtool), so a JSON report's nanoseconds are seconds; a
// counter ends in _total.
func metricName(scope, name string, gauge bool) (string, float64) {
	metric, scale := sanitize(name), 1.0
	if base, ok := strings.CutSuffix(metric, "_ns"); ok {
		metric, scale = base+"_seconds", 1e-9
	}
	full := ns + "_" + scope + "_" + metric
	if !gauge {
		full += "_total"
	}
	return full, scale
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// Collect reads every live object once.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	e := &emitter{ch: ch, descs: map[string]*prometheus.Desc{}}
	d := c.d
	servers, ports, pes, flows := d.snapshot()
	for _, s := range servers {
		if s.agent != nil {
			qpMetrics(e, "server", s.name, s.agent)
			e.fields("server", s.side.Stats(), []string{"server"}, []string{s.name})
		}
		if s.ep != nil {
			ol, ov := owner("server", s.name)
			e.fields("uet", s.ep.Counters(), ol, ov)
			for _, t := range s.ep.Targets() {
				e.fields("pdc", t, []string{"server", "src", "spdcid", "pdc", "job_id"},
					[]string{s.name, t.Src.String(), strconv.Itoa(int(t.SPDCID)), strconv.Itoa(int(t.PDC)), strconv.Itoa(int(t.JobID))})
			}
			e.fields("server", s.uet.Stats(), []string{"server"}, []string{s.name})
		}
		if s.tcp != nil {
			l, v := []string{"server"}, []string{s.name}
			e.emit(ns+"_tcp_server_received_bytes_total", prometheus.CounterValue, "bytes the tcp server's connections read", l, v, float64(s.tcp.Received()))
			e.emit(ns+"_tcp_server_connections_total", prometheus.CounterValue, "connections the tcp server accepted", l, v, float64(s.tcp.Accepted()))
			e.emit(ns+"_tcp_server_open_connections", prometheus.GaugeValue, "the tcp server's connections in progress", l, v, float64(s.tcp.Open()))
			e.emit(ns+"_tcp_server_accept_errors_total", prometheus.CounterValue, "accepts that failed and were retried (out of descriptors, an aborted handshake)", l, v, float64(s.tcp.AcceptErrors()))
		}
	}
	for _, fl := range flows {
		h := fl.health()
		fl.mu.Lock()
		a, ep, senders := fl.agent, fl.ep, fl.senders
		bytes, bps := fl.bytes, fl.lastBps
		fl.mu.Unlock()
		l, v := []string{"flow"}, []string{fl.spec.Name}
		if a != nil {
			qpMetrics(e, "flow", fl.spec.Name, a)
		}
		if ep != nil {
			ol, ov := owner("flow", fl.spec.Name)
			e.fields("uet", ep.Counters(), ol, ov)
			for _, snd := range senders {
				e.fields("pdc", snd.Counters(), []string{"flow", "pdc"}, []string{fl.spec.Name, strconv.Itoa(int(snd.PDC()))})
			}
			for _, ccc := range ep.CCCs() {
				e.fields("ccc", ccc, []string{"flow", "src", "dst", "tc"}, []string{fl.spec.Name, ccc.Src, ccc.Dst, strconv.Itoa(int(ccc.TC))})
			}
		}
		e.emit(ns+"_flow_runs_total", prometheus.CounterValue, "client runs of the flow ended", l, v, float64(h.Runs))
		e.emit(ns+"_flow_failures_total", prometheus.CounterValue, "client runs of the flow that failed", l, v, float64(h.Failures))
		e.emit(ns+"_flow_received_bytes_total", prometheus.CounterValue, "payload acknowledged in the flow's finished runs", l, v, float64(bytes))
		e.emit(ns+"_flow_last_goodput_bytes_per_second", prometheus.GaugeValue, "goodput of the flow's last finished run (bytes/s: Prometheus' base unit; ×8 for bit/s)", l, v, bps/8)
		e.emit(ns+"_flow_running", prometheus.GaugeValue, "1 while a client run is in progress", l, v, b2f(h.State == "running"))
		fl.mu.Lock()
		fct, ratio, late := fl.fct, fl.fctRatio, fl.late
		fct.counts, ratio.counts = slices.Clone(fct.counts), slices.Clone(ratio.counts)
		fl.mu.Unlock()
		e.emit(ns+"_flow_late_runs_total", prometheus.CounterValue, "runs of a series that started after their every slot", l, v, float64(late))
		e.histogram(ns+"_flow_fct_seconds", "flow completion time of the flow's sized runs that delivered their size", l, v, &fct, fctBounds)
		if fl.spec.series != nil {
			e.histogram(ns+"_flow_fct_ideal_ratio", "FCT over the ideal (the size at the path's bottleneck alone plus its base RTT) of a lab file's sized runs", l, v, &ratio, ratioBounds)
		}
		if fl.tcp != nil {
			fl.mu.Lock()
			retr, ce, noECN, kernelCC := fl.tcpRetransmits, fl.tcpDeliveredCE, fl.tcpNoECN, fl.tcpCC
			fl.mu.Unlock()
			if kernelCC != "" {
				// The congestion control the kernel ran (the BPF DCTCP's
				// name where it has no dctcp), as an info metric.
				e.emit(ns+"_flow_tcp_cc_info", prometheus.GaugeValue, "the congestion control the tcp flow's last connection ran (TCP_CONGESTION)",
					append(slices.Clone(l), "cc"), append(slices.Clone(v), kernelCC), 1)
			}
			e.emit(ns+"_flow_tcp_retransmits_total", prometheus.CounterValue, "segments the tcp flow's finished connections retransmitted (tcpi_total_retrans)", l, v, float64(retr))
			e.emit(ns+"_flow_tcp_delivered_ce_total", prometheus.CounterValue, "segments of the tcp flow's finished connections whose ACKs echoed CE (tcpi_delivered_ce)", l, v, float64(ce))
			e.emit(ns+"_flow_tcp_no_ecn_runs_total", prometheus.CounterValue, "the tcp flow's finished connections that did not negotiate ECN", l, v, float64(noECN))
		}
	}
	for _, p := range ports {
		portMetrics(e, p)
	}
	if len(ports) > 0 {
		dispatcherMetrics(e)
	}
	for _, x := range pes {
		tunnelMetrics(e, x)
		if x.agent != nil {
			agentMetrics(e, x.agent)
		}
	}
	for _, st := range d.deviceStates() {
		scope, l := "port", []string{"port"}
		if st.Kind == "pe" {
			scope, l = "tunnel_pe", []string{"dev"}
		}
		v := []string{st.Name}
		e.emit(ns+"_"+scope+"_attached", prometheus.GaugeValue, "1 while the "+scope+" is attached to its device; 0 while its device is gone", l, v, b2f(st.Attached))
		e.emit(ns+"_"+scope+"_device_lost_total", prometheus.CounterValue, "times the "+scope+"'s device went away under it", l, v, float64(st.lost))
		e.emit(ns+"_"+scope+"_reattached_total", prometheus.CounterValue, "times the "+scope+" was attached again on a device of its name", l, v, float64(st.reattached))
		e.emit(ns+"_"+scope+"_reattach_failures_total", prometheus.CounterValue, "attaches on a returned device that failed (retried every second)", l, v, float64(st.failures))
	}
	d.mu.Lock()
	chk := d.check
	d.mu.Unlock()
	if chk != nil {
		checkMetrics(e, chk)
	}
	h := d.Health()
	e.emit(ns+"_config_generation", prometheus.GaugeValue, "configurations applied since the start", nil, nil, float64(h.Generation))
	e.emit(ns+"_config_reloads_total", prometheus.CounterValue, "configurations applied", nil, nil, float64(h.ReloadsOK))
	e.emit(ns+"_config_reload_failures_total", prometheus.CounterValue, "configurations refused (invalid, or could not start)", nil, nil, float64(h.ReloadsFailed))
	e.emit(ns+"_config_last_reload_successful", prometheus.GaugeValue, "0 if the last configuration offered was refused", nil, nil, b2f(h.LastReloadError == ""))
	e.emit(ns+"_up", prometheus.GaugeValue, "1 unless degraded or draining", nil, nil, b2f(h.Status == "ok"))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// owner labels a series of a family that servers and flows share (qp,
// rocev2, uet): both labels, one empty, so that every series of a family
// has the same label names (what sum by() and joins expect).
func owner(kind, name string) ([]string, []string) {
	if kind == "server" {
		return []string{"server", "flow"}, []string{name, ""}
	}
	return []string{"server", "flow"}, []string{"", name}
}

// dispatcherMetrics exports the machine's xmit dispatcher (qdisc/dispatch),
// which carries every port's departures: machine-wide, so every daemon of
// the machine shows the same.
func dispatcherMetrics(e *emitter) {
	if st, err := dispatch.Read(); err == nil {
		dispatcherStatus(e, st)
	}
}

func dispatcherStatus(e *emitter, st dispatch.Status) {
	e.emit(ns+"_xmit_dispatcher_attached", prometheus.GaugeValue, "1 while the machine's xmit dispatcher exists (some port or kernel NP uses it)", nil, nil, b2f(st.Attached))
	for _, s := range []struct {
		kind string
		n    int
	}{{"port", st.Ports}, {"np", st.NPs}} {
		e.emit(ns+"_xmit_dispatcher_slots", prometheus.GaugeValue, "the dispatcher's slots held, by kind (ports, kernel NPs)", []string{"kind"}, []string{s.kind}, float64(s.n))
	}
	e.emit(ns+"_xmit_dispatcher_stale_slots", prometheus.GaugeValue, "slots a process that died left (freed at the next attach or detach, or by portctl sweep)", nil, nil, float64(st.Stale))
	for _, s := range []struct {
		event string
		n     uint64
	}{{"xmit", st.EmptySlot}, {"drop", st.DropEmptySlot}, {"np_xmit", st.NPEmptySlot}} {
		e.emit(ns+"_xmit_dispatcher_empty_slot_total", prometheus.CounterValue, "transmissions and drops that found a slot emptied by its port or NP leaving", []string{"event"}, []string{s.event}, float64(s.n))
	}
}

// qpMetrics exports an agent's QPs and its totals under its owner (kind
// server or flow).
func qpMetrics(e *emitter, kind, name string, a *agent.Agent) {
	ol, ov := owner(kind, name)
	for _, qp := range a.QPs() {
		peer := qp.Peer()
		e.fields("qp", qp.Counters(), append(slices.Clone(ol), "qpn", "peer", "peer_qpn"),
			append(slices.Clone(ov), fmt.Sprintf("%#x", qp.QPN()), peer.Addr.Addr().String(), fmt.Sprintf("%#x", peer.QPN)))
	}
	e.fields("rocev2", a.Counters(), ol, ov)
}

// tunnelMetrics exports a tunnel PE's counters; the RFC 6040 table's
// cells as fabriclab_tunnel_decap_cells_total{inner, outer}.
func tunnelMetrics(e *emitter, x livePE) {
	st, err := x.t.Stats()
	if err != nil {
		return
	}
	l, v := []string{"dev"}, []string{x.plan.Dev}
	e.fields("tunnel_encap", st.Encap, l, v)
	e.fields("tunnel_decap", st.Decap, l, v)
	for outer, n := range st.Encap.OuterECN {
		e.emit(ns+"_tunnel_encap_outer_ecn_total", prometheus.CounterValue, "encapsulated packets by the outer ECN codepoint written",
			[]string{"dev", "outer"}, []string{x.plan.Dev, tunnel.ECN(outer).String()}, float64(n))
	}
	for inner, row := range st.Decap.Cells {
		for outer, n := range row {
			e.emit(ns+"_tunnel_decap_cells_total", prometheus.CounterValue, "decapsulated packets by RFC 6040 cell",
				[]string{"dev", "inner", "outer"}, []string{x.plan.Dev, tunnel.ECN(inner).String(), tunnel.ECN(outer).String()}, float64(n))
		}
	}
}

// agentMetrics exports a PE agent's counters (host/pe.Stats) and its
// reaction times, from a light CNP's arrival at the PE to the limiter or
// the routes changed.
func agentMetrics(e *emitter, a *tunnelAgent) {
	st := a.ag.Stats()
	l, v := []string{"dev", "mode"}, []string{a.dev, a.mode.String()}
	for _, c := range []struct {
		name, help string
		n          uint64
	}{
		{"light_cnps_total", "WAN CNPs of light congestion (above T1) the agent took", st.LightCNPs},
		{"heavy_cnps_total", "WAN CNPs of heavy congestion (above T2) the agent took", st.HeavyCNPs},
		{"coalesced_total", "light CNPs within a WAN RTT of the last cut (rate agent)", st.Coalesced},
		{"rate_updates_total", "limiter rate changes (rate agent)", st.RateUpdates},
		{"spills_total", "moves of the tunnel's flows onto every WAN path (reroute agent)", st.Spills},
		{"unspills_total", "moves back to path 1 (reroute agent)", st.Unspills},
		{"errors_total", "limiter or route changes that failed", st.Errors},
		{"starts_total", "agents this daemon started on the device (a reload that changes the PE or its limiter starts a new one)", a.starts},
	} {
		e.emit(ns+"_pe_agent_"+c.name, prometheus.CounterValue, c.help, l, v, float64(c.n))
	}
	if a.mode == peagent.RateLimit {
		e.emit(ns+"_pe_agent_rate_bytes_per_second", prometheus.GaugeValue, "the limiter's rate (bytes/s)", l, v, float64(st.Rate)/8)
		e.emit(ns+"_pe_agent_min_rate_bytes_per_second", prometheus.GaugeValue, "the least rate the limiter was cut to (bytes/s)", l, v, float64(st.MinRate)/8)
	}
	if a.mode == peagent.Reroute {
		e.emit(ns+"_pe_agent_spilled", prometheus.GaugeValue, "1 while the tunnel's flows are spread over every WAN path", l, v, b2f(st.Spilled))
	}
	a.mu.Lock()
	h := a.reaction
	h.counts = slices.Clone(h.counts)
	a.mu.Unlock()
	e.histogram(ns+"_pe_agent_reaction_seconds", "from a light CNP's arrival at the PE to the agent's change in place", l, v, &h, reactionBounds)
}

// histogram emits h with its bounds.
func (e *emitter) histogram(name, help string, labels, values []string, h *histogram, bounds []float64) {
	key := name + "|" + strings.Join(labels, ",")
	desc, ok := e.descs[key]
	if !ok {
		desc = prometheus.NewDesc(name, help, labels, nil)
		e.descs[key] = desc
	}
	if m, err := prometheus.NewConstHistogram(desc, h.n, h.sum, h.cumulative(bounds), values...); err == nil {
		e.ch <- m
	}
}

// portMetrics exports a port's classes, and each class's sojourn
// histogram as a Prometheus histogram in seconds.
func portMetrics(e *emitter, p *port) {
	st, err := p.p.Stats()
	if err != nil {
		return
	}
	portName := describePort(p.cfg)
	rate := p.q.Rate
	if c, err := p.p.Config(); err == nil {
		rate = c.Rate // a PE agent's limiter moves it
	}
	e.emit(ns+"_port_rate_bytes_per_second", prometheus.GaugeValue, "the port's rate now (bytes/s)", []string{"port"}, []string{portName}, float64(rate)/8)
	// Port-wide: packets by kind, malformed ones, notifications not sent.
	e.fields("port", st.Port, []string{"port"}, []string{portName})
	if p.cfg.Shape {
		// A shaped port's HTB holds the real queue, which the virtual
		// queue models: its own counters, apart from the port's.
		if q, err := p.p.Qdisc(); err == nil {
			pl := []string{"port"}
			pv := []string{portName}
			e.emit(ns+"_port_shaper_backlog_bytes", prometheus.GaugeValue, "bytes in the shaped port's HTB queue (the real queue its virtual queue models)", pl, pv, float64(q.BacklogBytes))
			e.emit(ns+"_port_shaper_sent_bytes_total", prometheus.CounterValue, "bytes the shaped port's HTB sent", pl, pv, float64(q.SentBytes))
			e.emit(ns+"_port_shaper_drops_total", prometheus.CounterValue, "packets the shaped port's HTB dropped (the virtual queue's limit should drop first)", pl, pv, float64(q.Drops))
		}
	}
	for _, cs := range st.Classes {
		if cs.EnqueuedPackets == 0 && cs.Name == "" {
			continue
		}
		l := []string{"port", "class", "name"}
		v := []string{portName, strconv.Itoa(int(cs.Class)), cs.Name}
		e.fields("port", cs, l, v)
		e.sojourn(&cs, l, v)
	}
}

// sojourn emits a class's sojourn histogram in seconds: bucket b's upper
// bound is 2^(b+1) ns (readSojourn reads it back).
func (e *emitter) sojourn(cs *qdisc.ClassStats, l, v []string) {
	buckets := map[float64]uint64{}
	var cum uint64
	for b, n := range cs.Sojourn {
		cum += n
		buckets[float64(uint64(1)<<(b+1))/1e9] = cum
	}
	key := ns + "_port_sojourn_seconds|" + strings.Join(l, ",")
	desc, ok := e.descs[key]
	if !ok {
		desc = prometheus.NewDesc(ns+"_port_sojourn_seconds", "sojourn in the port's queue (log2 buckets)", l, nil)
		e.descs[key] = desc
	}
	if m, err := prometheus.NewConstHistogram(desc, cs.Sojourn.Count(), cs.SojournSum.Seconds(), buckets, v...); err == nil {
		e.ch <- m
	}
}
