package main

import (
	"fmt"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/fabriclab/fabriclab/host/lab/figure"
)

// zoomSamples is how much of the start of each run the right-hand panels show
// at full sampling resolution.
const zoomSamples = 500

var (
	colQueue = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	colPeak  = color.NRGBA{R: 31, G: 119, B: 180, A: 90} // not premultiplied
	colKTail = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	colKAvg  = color.RGBA{R: 44, G: 160, B: 44, A: 255}
	colPst   = color.RGBA{R: 148, G: 103, B: 189, A: 255}
	// One colour per scheme in the FCT plot, in schemeNames' order.
	schemeColors = []color.Color{colKTail, colKAvg, color.RGBA{R: 255, G: 127, B: 14, A: 255}, color.RGBA{R: 140, G: 86, B: 75, A: 255}, colQueue}
)

// firstRuns is each scheme's first run that has queue samples, in the
// order the schemes ran.
func firstRuns(r *Report) []*Result {
	var rows []*Result
	seen := map[string]bool{}
	for i := range r.Schemes {
		s := &r.Schemes[i]
		if s.Error == "" && len(s.Series.MeanBytes) > 0 && !seen[s.Name] {
			seen[s.Name] = true
			rows = append(rows, s)
		}
	}
	return rows
}

// writePlot draws queue.png: one row per scheme (small multiples, same y
// scale; each scheme's first run), the whole measured window on the left
// (10 ms means, maxima shaded lighter) and its first zoomSamples samples at
// full resolution on the right, with K_tail, K_avg and pst_target as
// reference lines.
func writePlot(path string, r *Report) error {
	rows := firstRuns(r)
	if len(rows) == 0 {
		return fmt.Errorf("plot: no scheme has queue samples")
	}
	// One y scale for all panels, so heights compare across schemes.
	yMax := float64(r.Tune.KTailBytes) * 1.2 / 1000
	for _, s := range rows {
		for _, v := range s.Series.MaxBytes {
			yMax = max(yMax, v/1000)
		}
		for _, v := range s.Zoom {
			yMax = max(yMax, float64(v)/1000)
		}
	}
	yMax *= 1.05
	kTail, kAvg := float64(r.Tune.KTailBytes)/1000, float64(r.Tune.KAvgBytes)/1000
	pst := float64(r.Setup.RateBps) / 8 * r.Tune.PstTarget.Seconds() / 1000
	sampleMs := r.Setup.SampleUs / 1000

	plots := make([][]*plot.Plot, len(rows))
	for i, s := range rows {
		full, err := seriesPlot(s, r.Setup.MeasureS, yMax, kTail, kAvg, pst)
		if err != nil {
			return err
		}
		zoom, err := zoomPlot(s, sampleMs, yMax, kTail, kAvg, pst)
		if err != nil {
			return err
		}
		if i == len(rows)-1 {
			full.X.Label.Text = "time in the measured window (s)"
			zoom.X.Label.Text = fmt.Sprintf("first %d samples (ms)", len(s.Zoom))
		}
		plots[i] = []*plot.Plot{full, zoom}
	}

	const width, rowHeight = 30 * vg.Centimeter, 5.5 * vg.Centimeter
	img := vgimg.NewWith(vgimg.UseWH(width, rowHeight*vg.Length(len(rows))+vg.Centimeter), vgimg.UseDPI(110))
	dc := draw.New(img)
	// A header line with the legend of the reference lines.
	header := dc
	header.Min.Y = dc.Max.Y - vg.Centimeter
	sty := draw.TextStyle{Color: color.Black, Font: plot.DefaultFont, Handler: plot.DefaultTextHandler, XAlign: draw.XLeft}
	sty.Font.Size = vg.Points(10)
	header.FillText(sty, vg.Point{X: dc.Min.X + vg.Centimeter/2, Y: header.Min.Y + vg.Centimeter/3},
		fmt.Sprintf("bottleneck queue (KB) per scheme at %s, %s, first run; dashed red: K_tail = %.1f KB (= ins_target), green: K_avg = %.1f KB, purple: pst_target = %.1f KB; light: 10 ms maxima",
			rateText(r.Setup.RateBps), r.Setup.Congestion, kTail, kAvg, pst))
	body := dc
	body.Max.Y = header.Min.Y
	tiles := draw.Tiles{Rows: len(rows), Cols: 2, PadX: vg.Centimeter / 2, PadY: vg.Centimeter / 4,
		PadTop: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4, PadLeft: vg.Centimeter / 4, PadRight: vg.Centimeter / 2}
	canvases := plot.Align(plots, tiles, body)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
	}

	return figure.SavePNG(path, img)
}

func seriesPlot(s *Result, measureS, yMax, kTail, kAvg, pst float64) (*plot.Plot, error) {
	p := newPanel(fmt.Sprintf("%s: mean %.1f KB, p99 %.1f KB", s.Label, s.Queue.MeanBytes/1000, s.Queue.P99Bytes/1000), yMax)
	n := len(s.Series.MeanBytes)
	mean, peak := make(plotter.XYs, n), make(plotter.XYs, n)
	for i := range n {
		t := float64(i) * s.Series.BucketMs / 1000
		mean[i] = plotter.XY{X: t, Y: s.Series.MeanBytes[i] / 1000}
		peak[i] = plotter.XY{X: t, Y: s.Series.MaxBytes[i] / 1000}
	}
	// The same x range in every panel.
	end := max(float64(n)*s.Series.BucketMs/1000, measureS)
	if err := addLine(p, peak, colPeak, nil); err != nil {
		return nil, err
	}
	if err := addLine(p, mean, colQueue, nil); err != nil {
		return nil, err
	}
	if err := addRefs(p, 0, end, kTail, kAvg, pst); err != nil {
		return nil, err
	}
	p.X.Min, p.X.Max = 0, end
	return p, nil
}

func zoomPlot(s *Result, sampleMs, yMax, kTail, kAvg, pst float64) (*plot.Plot, error) {
	p := newPanel(fmt.Sprintf("%s, every %.3g ms", s.Label, sampleMs), yMax)
	pts := make(plotter.XYs, len(s.Zoom))
	for i, b := range s.Zoom {
		pts[i] = plotter.XY{X: float64(i) * sampleMs, Y: float64(b) / 1000}
	}
	end := float64(max(len(s.Zoom), 1)) * sampleMs
	if len(pts) > 1 {
		if err := addLine(p, pts, colQueue, nil); err != nil {
			return nil, err
		}
	}
	if err := addRefs(p, 0, end, kTail, kAvg, pst); err != nil {
		return nil, err
	}
	p.X.Min, p.X.Max = 0, end
	return p, nil
}

func newPanel(title string, yMax float64) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(9)
	p.Y.Label.Text = "KB"
	p.Y.Min, p.Y.Max = 0, yMax
	p.X.Tick.Label.Font.Size = vg.Points(8)
	p.Y.Tick.Label.Font.Size = vg.Points(8)
	p.Add(plotter.NewGrid())
	return p
}

func addLine(p *plot.Plot, pts plotter.XYs, c color.Color, dashes []vg.Length) error {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	l.Color = c
	l.Width = vg.Points(0.8)
	l.Dashes = dashes
	p.Add(l)
	return nil
}

func addRefs(p *plot.Plot, x0, x1, kTail, kAvg, pst float64) error {
	for _, r := range []struct {
		y float64
		c color.Color
	}{{kTail, colKTail}, {kAvg, colKAvg}, {pst, colPst}} {
		if r.y <= 0 {
			continue
		}
		if err := addLine(p, plotter.XYs{{X: x0, Y: r.y}, {X: x1, Y: r.y}}, r.c, []vg.Length{vg.Points(4), vg.Points(3)}); err != nil {
			return err
		}
	}
	return nil
}

func rateText(bps uint64) string {
	switch {
	case bps >= 1e9 && bps%1e9 == 0:
		return fmt.Sprintf("%d Gbit/s", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%g Mbit/s", float64(bps)/1e6)
	}
	return fmt.Sprintf("%d bit/s", bps)
}

// writeFCTPlot draws fct.png: the CDF of the short flows' completion times
// per scheme, pooled over the runs, on a log time axis, and a panel of its
// tail (the last 10 %).
func writeFCTPlot(path string, r *Report) error {
	type curve struct {
		label string
		c     color.Color
		fcts  []float64
	}
	var curves []curve
	for i, name := range schemeNames {
		var all []float64
		label := ""
		for j := range r.Schemes {
			s := &r.Schemes[j]
			if s.Error == "" && s.Name == name {
				all = append(all, s.ShortFCTsUs...)
				label = s.Label
			}
		}
		if len(all) > 0 {
			slices.Sort(all)
			curves = append(curves, curve{label, schemeColors[i%len(schemeColors)], all})
		}
	}
	if len(curves) == 0 {
		return fmt.Errorf("plot: no scheme has short flows")
	}
	whole, tail := plot.New(), plot.New()
	whole.Title.Text = fmt.Sprintf("short-flow FCT CDF (%s, all runs pooled)", r.Setup.Congestion)
	tail.Title.Text = "the tail: CDF from 0.9"
	for _, p := range []*plot.Plot{whole, tail} {
		p.X.Label.Text = "FCT (ms, log scale)"
		p.Y.Label.Text = "fraction of flows"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Add(plotter.NewGrid())
		p.Legend.Top, p.Legend.Left = false, false
	}
	for _, cv := range curves {
		pts := make(plotter.XYs, len(cv.fcts))
		for k, v := range cv.fcts {
			pts[k] = plotter.XY{X: max(v, 1) / 1000, Y: float64(k+1) / float64(len(cv.fcts))}
		}
		for _, p := range []*plot.Plot{whole, tail} {
			l, err := plotter.NewLine(pts)
			if err != nil {
				return fmt.Errorf("plot: %w", err)
			}
			l.Color, l.Width = cv.c, vg.Points(1)
			p.Add(l)
			p.Legend.Add(fmt.Sprintf("%s (n=%d)", cv.label, len(cv.fcts)), l)
		}
	}
	// Set after Add, which widens the axes to the data.
	whole.Y.Min, whole.Y.Max = 0, 1
	tail.Y.Min, tail.Y.Max = 0.9, 1
	img := vgimg.NewWith(vgimg.UseWH(30*vg.Centimeter, 11*vg.Centimeter), vgimg.UseDPI(110))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadY: vg.Centimeter / 2,
		PadTop: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4, PadLeft: vg.Centimeter / 4, PadRight: vg.Centimeter / 2}
	plots := [][]*plot.Plot{{whole, tail}}
	canvases := plot.Align(plots, tiles, dc)
	whole.Draw(canvases[0][0])
	tail.Draw(canvases[0][1])
	return figure.SavePNG(path, img)
}
