package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/fabriclab/fabriclab/host/lab/figure"
)

// goodputWindowS smooths the plotted goodput: the received-bytes counter
// moves in whole packets, so one 10 ms period is noisy.
const goodputWindowS = 0.1

var (
	// flowColors are matplotlib's tab10.
	flowColors = []color.RGBA{
		{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255}, {148, 103, 189, 255},
		{140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}, {188, 189, 34, 255}, {23, 190, 207, 255},
	}
	colQueue = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	colMinTh = color.RGBA{R: 44, G: 160, B: 44, A: 255}
	colMaxTh = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	colFair  = color.RGBA{R: 90, G: 90, B: 90, A: 255}
)

func flowColor(i int) color.RGBA { return flowColors[i%len(flowColors)] }

// rocePlots builds the three panels: per-flow rates (goodput and Rc),
// per-flow α, and the queue with the WRED thresholds.
func rocePlots(r *RoCEReport) (rates, alpha, queue *plot.Plot, err error) {
	s := &r.Series
	if len(s.T) < 2 {
		return nil, nil, nil, fmt.Errorf("plot: %d samples, need at least 2", len(s.T))
	}
	end := max(r.DurationS, s.T[len(s.T)-1])
	dashed := []vg.Length{vg.Points(3), vg.Points(2)}

	rates = newPanel("per-flow rate: goodput at the receiver (solid, 100 ms mean) and the sender's DCQCN Rc (dashed, wire rate)", "Mbit/s", end)
	alpha = newPanel("α, each sender's congestion estimate (a CNP cuts Rc by α/2)", "α", end)
	alpha.Y.Min, alpha.Y.Max = 0, 1.05
	cc := &r.ClassConfig
	queue = newPanel(fmt.Sprintf("class 3 backlog, sampled every %s (dashed: min_th %s KB, max_th %s KB)",
		shortDur(durationS(s.PeriodS)), kb(uint64(cc.MinThBytes)), kb(uint64(cc.MaxThBytes))), "KB", end)

	var yRate float64
	for i := range r.Flows {
		f := &r.Flows[i]
		c := flowColor(i)
		ts, gp := s.Goodput(i, f.StartS, goodputWindowS)
		var good, rc, al plotter.XYs
		for j := range ts {
			good = append(good, plotter.XY{X: ts[j], Y: gp[j] / 1e6})
			yRate = max(yRate, gp[j]/1e6)
		}
		for j, t := range s.T {
			if t < f.StartS || s.Flows[i].RcBps[j] == 0 {
				continue
			}
			rc = append(rc, plotter.XY{X: t, Y: s.Flows[i].RcBps[j] / 1e6})
			al = append(al, plotter.XY{X: t, Y: s.Flows[i].Alpha[j]})
			yRate = max(yRate, s.Flows[i].RcBps[j]/1e6)
		}
		if len(rc) > 1 {
			if _, err := addLine(rates, rc, withAlpha(c, 170), 0.7, dashed); err != nil {
				return nil, nil, nil, err
			}
			if _, err := addLine(alpha, al, c, 1, nil); err != nil {
				return nil, nil, nil, err
			}
		}
		if len(good) > 1 {
			l, err := addLine(rates, good, c, 1.3, nil)
			if err != nil {
				return nil, nil, nil, err
			}
			rates.Legend.Add(fmt.Sprintf("%s (joins at %.0f s)", f.Label(), f.StartS), l)
		}
	}
	// The fair share of the payload once every flow has joined.
	if n := len(r.Flows); n > 1 && r.AllJoinedS < end {
		fair := payloadFraction(r.MTU, r.MessageBytes) * float64(r.Rate) / float64(n) / 1e6
		l, err := addLine(rates, plotter.XYs{{X: r.AllJoinedS, Y: fair}, {X: end, Y: fair}}, colFair, 0.8, []vg.Length{vg.Points(1), vg.Points(2)})
		if err != nil {
			return nil, nil, nil, err
		}
		rates.Legend.Add("fair share of the payload", l)
	}
	rates.Y.Min, rates.Y.Max = 0, max(yRate, float64(r.Rate)/1e6)*1.05
	rates.Legend.Top = true
	rates.Legend.TextStyle.Font.Size = vg.Points(8)

	q := make(plotter.XYs, len(s.T))
	var yQ float64
	for j, t := range s.T {
		q[j] = plotter.XY{X: t, Y: float64(s.BacklogBytes[j]) / 1024}
		yQ = max(yQ, q[j].Y)
	}
	if _, err := addLine(queue, q, colQueue, 0.8, nil); err != nil {
		return nil, nil, nil, err
	}
	minTh, maxTh := float64(cc.MinThBytes)/1024, float64(cc.MaxThBytes)/1024
	// Keep the queue readable: max_th is drawn only if the queue comes
	// within reach of it.
	top := max(yQ, minTh) * 1.15
	if maxTh <= top*1.5 {
		top = max(top, maxTh*1.05)
	}
	for _, th := range []struct {
		y float64
		c color.Color
	}{{minTh, colMinTh}, {maxTh, colMaxTh}} {
		if th.y > 0 && th.y <= top {
			if _, err := addLine(queue, plotter.XYs{{X: 0, Y: th.y}, {X: end, Y: th.y}}, th.c, 1, []vg.Length{vg.Points(4), vg.Points(3)}); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	queue.Y.Min, queue.Y.Max = 0, top
	queue.X.Label.Text = "time since the first sender joined (s)"
	return rates, alpha, queue, nil
}

// zoomPlots builds the zoom column: Rc (solid) and Rt (dotted) per flow,
// α, and the queue, every zoom sample. nil if there is no zoom.
func zoomPlots(r *RoCEReport) ([]*plot.Plot, error) {
	z := &r.Zoom
	if len(z.T) < 2 {
		return nil, nil
	}
	// Milliseconds from the zoom's start: seconds would label every tick
	// alike.
	from, to := z.T[0], z.T[len(z.T)-1]
	ms := func(t float64) float64 { return (t - from) * 1000 }
	panel := func(title, ylabel string) *plot.Plot { return newPanel(title, ylabel, ms(to)) }
	rates := panel(fmt.Sprintf("zoom t=%.1f-%.1f s, every %s: Rc (solid) and Rt (dotted)", from, to, shortDur(durationS(z.PeriodS))), "Mbit/s")
	alpha := panel("α", "α")
	queue := panel("class 3 backlog", "KB")
	var yRate, yQ float64
	for i := range r.Flows {
		c := flowColor(i)
		var rc, rt, al plotter.XYs
		for j, t := range z.T {
			if z.Flows[i].RcBps[j] == 0 {
				continue
			}
			rc = append(rc, plotter.XY{X: ms(t), Y: z.Flows[i].RcBps[j] / 1e6})
			rt = append(rt, plotter.XY{X: ms(t), Y: z.Flows[i].RtBps[j] / 1e6})
			al = append(al, plotter.XY{X: ms(t), Y: z.Flows[i].Alpha[j]})
			yRate = max(yRate, z.Flows[i].RcBps[j]/1e6, z.Flows[i].RtBps[j]/1e6)
		}
		if len(rc) < 2 {
			continue
		}
		if _, err := addLine(rates, rt, withAlpha(c, 200), 0.8, []vg.Length{vg.Points(1), vg.Points(1.5)}); err != nil {
			return nil, err
		}
		if _, err := addLine(rates, rc, c, 1.1, nil); err != nil {
			return nil, err
		}
		if _, err := addLine(alpha, al, c, 1, nil); err != nil {
			return nil, err
		}
	}
	q := make(plotter.XYs, len(z.T))
	for j, t := range z.T {
		q[j] = plotter.XY{X: ms(t), Y: float64(z.BacklogBytes[j]) / 1024}
		yQ = max(yQ, q[j].Y)
	}
	if _, err := addLine(queue, q, colQueue, 0.9, nil); err != nil {
		return nil, err
	}
	minTh := float64(r.ClassConfig.MinThBytes) / 1024
	top := max(yQ, minTh) * 1.15
	if _, err := addLine(queue, plotter.XYs{{X: 0, Y: minTh}, {X: ms(to), Y: minTh}}, colMinTh, 1, []vg.Length{vg.Points(4), vg.Points(3)}); err != nil {
		return nil, err
	}
	rates.Y.Min, rates.Y.Max = 0, yRate*1.1
	var aMax float64
	for i := range r.Flows {
		for _, a := range z.Flows[i].Alpha {
			aMax = max(aMax, a)
		}
	}
	alpha.Y.Min, alpha.Y.Max = 0, max(aMax*1.2, 0.05)
	queue.Y.Min, queue.Y.Max = 0, top
	queue.X.Label.Text = fmt.Sprintf("ms after t=%.2f s", from)
	return []*plot.Plot{rates, alpha, queue}, nil
}

// writeRoCEPlot draws the rates, α and the queue over time, one panel
// above the other on the same time axis, and the zoom beside them, into a
// PNG at path.
func writeRoCEPlot(path string, r *RoCEReport) error {
	rates, alpha, queue, err := rocePlots(r)
	if err != nil {
		return err
	}
	zoom, err := zoomPlots(r)
	if err != nil {
		return err
	}
	width := 30 * vg.Centimeter
	columns := [][]*plot.Plot{{rates, alpha, queue}}
	if zoom != nil {
		width = 42 * vg.Centimeter
		columns = append(columns, zoom)
	}
	heights := []vg.Length{10 * vg.Centimeter, 4.5 * vg.Centimeter, 6.5 * vg.Centimeter}
	return writePanels(path, plotTitle(r), width, heights, columns)
}

// writePanels draws a title line and columns of panels, one above the
// other, row i heights[i] high, into a PNG at path: one column fills the
// width, two split it 70/30.
func writePanels(path, title string, width vg.Length, heights []vg.Length, columns [][]*plot.Plot) error {
	const headerH = vg.Centimeter
	total := headerH
	for _, h := range heights {
		total += h
	}
	img := vgimg.NewWith(vgimg.UseWH(width, total), vgimg.UseDPI(110))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	header := dc
	header.Min.Y = dc.Max.Y - headerH
	sty := draw.TextStyle{Color: color.Black, Font: plot.DefaultFont, Handler: plot.DefaultTextHandler, XAlign: draw.XLeft}
	sty.Font.Size = vg.Points(11)
	header.FillText(sty, vg.Point{X: dc.Min.X + vg.Centimeter/2, Y: header.Min.Y + vg.Centimeter/3}, title)

	body := dc
	body.Max.Y = header.Min.Y
	tiles := draw.Tiles{Rows: len(heights), Cols: 1, PadY: vg.Centimeter / 4,
		PadTop: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4, PadLeft: vg.Centimeter / 4, PadRight: vg.Centimeter / 2}
	for k, col := range columns {
		area := body
		if len(columns) > 1 { // the whole run on 70 %, the zoom on 30 %
			split := body.Min.X + (body.Max.X-body.Min.X)*7/10
			if k == 0 {
				area.Max.X = split
			} else {
				area.Min.X = split
			}
		}
		rows := make([][]*plot.Plot, len(col))
		for i, p := range col {
			rows[i] = []*plot.Plot{p}
		}
		// Align lines the data areas up horizontally; the rows get their
		// own heights here.
		canvases := plot.Align(rows, tiles, area)
		y := area.Max.Y
		for i := range rows {
			c := canvases[i][0]
			c.Max.Y = y - tiles.PadTop
			c.Min.Y = y - heights[i] + tiles.PadBottom
			y -= heights[i]
			rows[i][0].Draw(c)
		}
	}

	return figure.SavePNG(path, img)
}

func plotTitle(r *RoCEReport) string {
	cc := &r.ClassConfig
	ts := ""
	if r.Stretch != 1 {
		ts = fmt.Sprintf(", timers x%g", r.Stretch)
	}
	return fmt.Sprintf("DCQCN (%s profile%s): %d RoCEv2 flow(s) into a %s port, WRED min_th %s KB, max_th %s KB, max_p %g;  %s utilization, Jain %.3f",
		r.Profile, ts, len(r.Flows), r.Rate, kb(uint64(cc.MinThBytes)), kb(uint64(cc.MaxThBytes)), cc.MaxP, pct(r.UtilizationWindow), r.JainWindow)
}

func newPanel(title, ylabel string, end float64) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(9)
	p.Y.Label.Text = ylabel
	p.X.Min, p.X.Max = 0, end
	p.X.Tick.Label.Font.Size = vg.Points(8)
	p.Y.Tick.Label.Font.Size = vg.Points(8)
	p.Add(plotter.NewGrid())
	return p
}

func addLine(p *plot.Plot, pts plotter.XYs, c color.Color, width float64, dashes []vg.Length) (*plotter.Line, error) {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, fmt.Errorf("plot: %w", err)
	}
	l.Color = c
	l.Width = vg.Points(width)
	l.Dashes = dashes
	p.Add(l)
	return l, nil
}

// withAlpha is c with opacity a (not premultiplied).
func withAlpha(c color.RGBA, a uint8) color.NRGBA { return color.NRGBA{R: c.R, G: c.G, B: c.B, A: a} }
