package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var colLimit = color.RGBA{R: 0, G: 0, B: 0, A: 255}

// uetPlots builds the UET run's panels: per-flow goodput, per-flow window
// and credit (or bytes in flight when the CCC runs no window), and the
// queue with the WRED thresholds and the buffer.
func uetPlots(r *UETReport) (rates, cc, queue *plot.Plot, err error) {
	s := &r.Series
	if len(s.T) < 2 {
		return nil, nil, nil, fmt.Errorf("plot: %d samples, need at least 2", len(s.T))
	}
	end := s.T[len(s.T)-1]
	dashed := []vg.Length{vg.Points(3), vg.Points(2)}
	dotted := []vg.Length{vg.Points(1), vg.Points(1.5)}

	rates = newPanel("per-flow goodput: payload acknowledged (100 ms mean)", "Mbit/s", end)
	hasCwnd, hasCredit := false, false
	for i := range s.Flows {
		hasCwnd = hasCwnd || slicesAny(s.Flows[i].CwndBytes, func(v int) bool { return v != noWindow })
		hasCredit = hasCredit || len(s.Flows[i].CreditBytes) > 0
	}
	title := "per-flow NSCC cwnd (solid)"
	switch {
	case hasCwnd && hasCredit:
		title += " and RCCC credit (dashed)"
	case hasCredit:
		title = "per-flow RCCC credit (dashed) and bytes in flight (dotted)"
	case !hasCwnd:
		title = "per-flow bytes in flight (dotted): the CCCs run no window"
	}
	cc = newPanel(title, "KB", end)
	cfg := &r.ClassConfig
	queue = newPanel(fmt.Sprintf("class 3 backlog, sampled every %s (dashed: min_th %s KB, max_th %s KB; solid: the %s KB buffer)",
		shortDur(durationS(s.PeriodS)), kb(uint64(cfg.MinThBytes)), kb(uint64(cfg.MaxThBytes)), kb(uint64(cfg.LimitBytes))), "KB", end)

	var yRate, yCC, yCCMin float64
	for i := range r.Flows {
		f, fs := &r.Flows[i], &s.Flows[i]
		c := flowColor(i)
		ts, gp := s.Goodput(i, goodputWindowS)
		var good, cwnd, credit, flight plotter.XYs
		for j := range ts {
			good = append(good, plotter.XY{X: ts[j], Y: gp[j] / 1e6})
			yRate = max(yRate, gp[j]/1e6)
		}
		for j, t := range s.T {
			if f.FCTS > 0 && t > f.FCTS {
				break
			}
			if j < len(fs.CwndBytes) && fs.CwndBytes[j] != noWindow {
				cwnd = append(cwnd, plotter.XY{X: t, Y: float64(fs.CwndBytes[j]) / 1024})
				yCC = max(yCC, float64(fs.CwndBytes[j])/1024)
			}
			if j < len(fs.CreditBytes) {
				credit = append(credit, plotter.XY{X: t, Y: float64(fs.CreditBytes[j]) / 1024})
				yCC = max(yCC, float64(fs.CreditBytes[j])/1024)
				yCCMin = min(yCCMin, float64(fs.CreditBytes[j])/1024)
			}
			if !hasCwnd && j < len(fs.InFlightBytes) {
				flight = append(flight, plotter.XY{X: t, Y: float64(fs.InFlightBytes[j]) / 1024})
				yCC = max(yCC, float64(fs.InFlightBytes[j])/1024)
			}
		}
		for _, l := range []struct {
			pts    plotter.XYs
			width  float64
			dashes []vg.Length
		}{{cwnd, 1, nil}, {credit, 0.8, dashed}, {flight, 0.8, dotted}} {
			if len(l.pts) > 1 {
				if _, err := addLine(cc, l.pts, c, l.width, l.dashes); err != nil {
					return nil, nil, nil, err
				}
			}
		}
		if len(good) > 1 {
			l, err := addLine(rates, good, c, 1.3, nil)
			if err != nil {
				return nil, nil, nil, err
			}
			rates.Legend.Add(fmt.Sprintf("%s (FCT %s)", f.Label(), shortDur(durationS(f.FCTS))), l)
		}
	}
	if n := len(r.Flows); n > 1 {
		fair := r.PayloadFraction * float64(r.Rate) / float64(n) / 1e6
		l, err := addLine(rates, plotter.XYs{{X: 0, Y: fair}, {X: end, Y: fair}}, colFair, 0.8, []vg.Length{vg.Points(1), vg.Points(2)})
		if err != nil {
			return nil, nil, nil, err
		}
		rates.Legend.Add("fair share of the payload capacity", l)
	}
	rates.Y.Min, rates.Y.Max = 0, max(yRate, float64(r.Rate)/1e6)*1.05
	rates.Legend.Top = true
	rates.Legend.TextStyle.Font.Size = vg.Points(8)
	cc.Y.Min, cc.Y.Max = yCCMin*1.1, max(yCC, 1)*1.1

	q := make(plotter.XYs, len(s.T))
	for j, t := range s.T {
		q[j] = plotter.XY{X: t, Y: float64(s.BacklogBytes[j]) / 1024}
	}
	if _, err := addLine(queue, q, colQueue, 0.8, nil); err != nil {
		return nil, nil, nil, err
	}
	for _, th := range []struct {
		y      float64
		c      color.Color
		dashes []vg.Length
	}{{float64(cfg.MinThBytes) / 1024, colMinTh, []vg.Length{vg.Points(4), vg.Points(3)}},
		{float64(cfg.MaxThBytes) / 1024, colMaxTh, []vg.Length{vg.Points(4), vg.Points(3)}},
		{float64(cfg.LimitBytes) / 1024, colLimit, nil}} {
		if th.y > 0 {
			if _, err := addLine(queue, plotter.XYs{{X: 0, Y: th.y}, {X: end, Y: th.y}}, th.c, 1, th.dashes); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	queue.Y.Min, queue.Y.Max = 0, float64(cfg.LimitBytes)/1024*1.1
	queue.X.Label.Text = "time since the senders started (s)"
	return rates, cc, queue, nil
}

func slicesAny(xs []int, f func(int) bool) bool {
	for _, x := range xs {
		if f(x) {
			return true
		}
	}
	return false
}

// writeUETPlot draws goodput, window and credit, and the queue over the
// run, one panel above the other, into a PNG at path.
func writeUETPlot(path string, r *UETReport) error {
	rates, cc, queue, err := uetPlots(r)
	if err != nil {
		return err
	}
	heights := []vg.Length{9 * vg.Centimeter, 6.5 * vg.Centimeter, 6.5 * vg.Centimeter}
	return writePanels(path, uetPlotTitle(r), 30*vg.Centimeter, heights, [][]*plot.Plot{{rates, cc, queue}})
}

func uetPlotTitle(r *UETReport) string {
	trim := "trimming"
	if !r.Trim {
		trim = "no trimming"
	}
	return fmt.Sprintf("UET, CC %s: %d flows into a %s port, buffer %s KB, %s;  tail FCT %.3f x ideal, Jain %.3f, queue p99 %s KB",
		r.CC, len(r.Flows), r.Rate, kb(uint64(r.ClassConfig.LimitBytes)), trim, r.TailOverIdeal, r.Jain, kb(r.Queue.P99Bytes))
}
