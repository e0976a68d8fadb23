package main

import (
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// tcpSnap is what the tool reads from a long flow's TCP_INFO.
type tcpSnap struct {
	At           time.Time
	BytesAcked   uint64
	TotalRetrans uint64
	MinRTT       time.Duration
	SRTT         time.Duration
	ECN          bool
	Congestion   string
	Rc           uint64 // a RoCE QP's DCQCN rate, bit/s
}

// longFlowOver is one flow's goodput and retransmits between two
// snapshots, its rates and times the fabric's (the lab's slowed by k).
func longFlowOver(sender string, a, b tcpSnap, k units.Timescale) LongFlow {
	f := LongFlow{Sender: sender, Retransmits: sub(b.TotalRetrans, a.TotalRetrans),
		MinRTTUs: us(k.Fabric(b.MinRTT)), SRTTUs: us(k.Fabric(b.SRTT)), ECN: b.ECN, Congestion: b.Congestion, RcBps: uint64(float64(b.Rc) * k.K())}
	if dt := k.Fabric(b.At.Sub(a.At)); dt > 0 {
		f.GoodputBps = float64(sub(b.BytesAcked, a.BytesAcked)) * 8 / dt.Seconds()
	}
	return f
}

// window is what the privileged part measured for one scheme.
type window struct {
	Start, End   qdisc.ClassStats // class counters at the window's edges
	StartT, EndT time.Time
	Backlog      []uint64 // class backlog every SampleEvery
	SampleEvery  time.Duration
	FCTs         [][]time.Duration // short flows by sender
	ShortFailed  int
	LongSenders  []string // sender of each long flow
	LongA, LongB []tcpSnap
	Incast       IncastResult // the incast phase after the window
	// Timescale slowed the fabric: every time above is the lab's (wall),
	// k times the fabric's.
	Timescale units.Timescale
	// The host-lost meter's view (host/hostlost): its report of the
	// scheme's run, the window's edges on its clock, the starved time
	// in the window and in each short flow's span (FCTs' order).
	Host               *hostlost.Report
	StartMono, EndMono time.Duration
	Starved            time.Duration
	FCTStarved         [][]time.Duration
}

// seriesBucket is the resolution of the series in the JSON file and the
// full-window plot panels.
const seriesBucket = 10 * time.Millisecond

// buildResult turns one scheme's measurements into its report row, in
// the fabric's times and rates (rate is the fabric's).
func buildResult(s Scheme, rate units.Rate, w *window) Result {
	k := w.Timescale
	r := Result{Scheme: s, Describe: s.Params.describe(rate)}
	dt := w.EndT.Sub(w.StartT) // on the wire
	r.MeasuredS = k.Fabric(dt).Seconds()
	r.Queue = queueStats(w.Backlog, rate)
	r.Series = downsample(w.Backlog, w.SampleEvery, seriesBucket)
	r.Zoom = append([]uint64{}, w.Backlog[:min(len(w.Backlog), zoomSamples)]...)

	a, b := &w.Start, &w.End
	r.DequeuedBytes = sub(b.DequeuedBytes, a.DequeuedBytes)
	r.Utilization = utilization(r.DequeuedBytes, k.Rate(rate), dt)
	if w.Host != nil {
		r.HostLost = w.Host
		if dt > 0 {
			r.HostLostShare = float64(w.Starved) / float64(dt)
		}
		r.UtilizationNet = utilization(r.DequeuedBytes, k.Rate(rate), dt-w.Starved)
	}
	if n := sub(b.SojournSamples, a.SojournSamples); n > 0 {
		r.SojournMeanUs = us(k.Fabric(time.Duration(sub(uint64(b.SojournSum), uint64(a.SojournSum)) / n)))
	}
	r.ECTArrivals = sub(b.ArrivedECT0+b.ArrivedECT1, a.ArrivedECT0+a.ArrivedECT1)
	r.CEMarks = sub(b.CEMarked(), a.CEMarked())
	r.InsMarks = sub(b.AQMInsMarks, a.AQMInsMarks)
	r.PstMarks = sub(b.AQMPstMarks, a.AQMPstMarks)
	r.Drops = sub(b.DroppedPackets(), a.DroppedPackets())

	var all, starved []time.Duration
	for i, f := range w.FCTs {
		all = append(all, f...)
		r.ShortBySender = append(r.ShortBySender, stats.Summarize(fabricUs(f, k)))
		if i < len(w.FCTStarved) && len(w.FCTStarved[i]) == len(f) {
			starved = append(starved, w.FCTStarved[i]...)
		}
	}
	r.ShortFCTUs = stats.Summarize(fabricUs(all, k))
	r.ShortFCTsUs = fabricUs(all, k)
	if w.Host != nil && len(starved) == len(all) {
		r.ShortFCTNetUs = stats.Summarize(netUs(all, starved, k))
	}
	r.ShortFailed = w.ShortFailed
	r.Incast = w.Incast

	for i := range w.LongSenders {
		if i >= len(w.LongA) || i >= len(w.LongB) {
			break
		}
		f := longFlowOver(w.LongSenders[i], w.LongA[i], w.LongB[i], k)
		r.Long = append(r.Long, f)
		r.LongGoodputBps += f.GoodputBps
		r.Retransmits += f.Retransmits
	}
	return r
}
