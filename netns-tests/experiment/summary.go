package main

import (
	"math"

	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Summary is one scheme over its runs: every metric's mean with a 95 %
// confidence interval.
type Summary struct {
	Name     string `json:"name"`
	Label    string `json:"label"`
	Describe string `json:"describe"`
	Runs     int    `json:"runs"`   // that completed
	Failed   int    `json:"failed"` // that failed (not in the stats)

	MeanQueueKB    stats.Stat `json:"mean_queue_kb"`
	MeanQueueUs    stats.Stat `json:"mean_queue_us"`
	P99QueueKB     stats.Stat `json:"p99_queue_kb"`
	Utilization    stats.Stat `json:"utilization_percent"`
	ShortFCTMeanUs stats.Stat `json:"short_fct_mean_us"`
	ShortFCTP99Us  stats.Stat `json:"short_fct_p99_us"`
	Drops          stats.Stat `json:"drops"`
	MarkedPercent  stats.Stat `json:"marked_percent"` // CE marks / ECT arrivals
	Retransmits    stats.Stat `json:"long_retransmits"`
	IncastQCTP50Us stats.Stat `json:"incast_qct_p50_us"`
	IncastQCTP99Us stats.Stat `json:"incast_qct_p99_us"`
	IncastDrops    stats.Stat `json:"incast_drops"`
	IncastFailed   stats.Stat `json:"incast_failed"`
	// The host's part (Result.HostLostShare, in percent) and the figures
	// net of it; HostStarved counts the runs the meter found over its
	// budget.
	HostLostPercent   stats.Stat `json:"host_lost_percent"`
	HostStarved       int        `json:"host_starved_runs"`
	UtilizationNet    stats.Stat `json:"utilization_net_percent"`
	ShortFCTNetMeanUs stats.Stat `json:"short_fct_net_mean_us"`
	ShortFCTNetP99Us  stats.Stat `json:"short_fct_net_p99_us"`
}

// summarizeRuns builds one Summary per scheme of list from the runs in rs.
func summarizeRuns(list []Scheme, rs []Result, rate units.Rate) []Summary {
	out := make([]Summary, 0, len(list))
	for _, sc := range list {
		s := Summary{Name: sc.Name, Label: sc.Label, Describe: sc.Params.describe(rate)}
		var mq, mqus, pq, ut, fm, fp, dr, mk, rt, q50, q99, idr, ifl, hl, un, fnm, fnp []float64
		nan := math.NaN()
		for i := range rs {
			r := &rs[i]
			if r.Name != sc.Name {
				continue
			}
			if r.Error != "" {
				s.Failed++
				continue
			}
			s.Runs++
			mq = append(mq, r.Queue.MeanBytes/1000)
			mqus = append(mqus, r.Queue.MeanUs)
			pq = append(pq, r.Queue.P99Bytes/1000)
			ut = append(ut, 100*r.Utilization)
			if r.ShortFCTUs.N > 0 {
				fm, fp = append(fm, r.ShortFCTUs.Mean), append(fp, r.ShortFCTUs.P99)
			}
			dr = append(dr, float64(r.Drops))
			if r.ECTArrivals > 0 {
				mk = append(mk, 100*float64(r.CEMarks)/float64(r.ECTArrivals))
			} else {
				mk = append(mk, nan)
			}
			rt = append(rt, float64(r.Retransmits))
			if r.HostLost != nil {
				hl, un = append(hl, 100*r.HostLostShare), append(un, 100*r.UtilizationNet)
				if r.HostLost.HostStarved {
					s.HostStarved++
				}
			}
			if r.ShortFCTNetUs.N > 0 {
				fnm, fnp = append(fnm, r.ShortFCTNetUs.Mean), append(fnp, r.ShortFCTNetUs.P99)
			}
			if r.Incast.Rounds > 0 {
				if r.Incast.QCTUs.N > 0 {
					q50, q99 = append(q50, r.Incast.QCTUs.P50), append(q99, r.Incast.QCTUs.P99)
				}
				idr = append(idr, float64(r.Incast.Drops))
				ifl = append(ifl, float64(r.Incast.Failed))
			}
		}
		s.MeanQueueKB, s.MeanQueueUs, s.P99QueueKB, s.Utilization = stats.NewStat(mq), stats.NewStat(mqus), stats.NewStat(pq), stats.NewStat(ut)
		s.ShortFCTMeanUs, s.ShortFCTP99Us = stats.NewStat(fm), stats.NewStat(fp)
		s.Drops, s.MarkedPercent, s.Retransmits = stats.NewStat(dr), stats.NewStat(mk), stats.NewStat(rt)
		s.IncastQCTP50Us, s.IncastQCTP99Us, s.IncastDrops, s.IncastFailed = stats.NewStat(q50), stats.NewStat(q99), stats.NewStat(idr), stats.NewStat(ifl)
		s.HostLostPercent, s.UtilizationNet = stats.NewStat(hl), stats.NewStat(un)
		s.ShortFCTNetMeanUs, s.ShortFCTNetP99Us = stats.NewStat(fnm), stats.NewStat(fnp)
		out = append(out, s)
	}
	return out
}
