package main

import (
	"bufio"
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// zoomSamples is how much of the start of each run the right-hand panels show
// at full sampling resolution.
const zoomSamples = 500

var (
	colQueue = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	colPeak  = color.NRGBA{R: 31, G: 119, B: 180, A: 90} // not premultiplied
	colKTail = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	colKAvg  = color.RGBA{R: 44, G: 160, B: 44, A: 255}
)

// writePlot draws queue.png: one row per scheme (small multiples, same y
// scale), the whole measured window on the left (10 ms means, maxima shaded
// lighter) and its first zoomSamples samples at full resolution on the
// right, with K_tail and K_avg as reference lines.
func writePlot(path string, r *Report) error {
	var rows []*Result
	for i := range r.Schemes {
		if r.Schemes[i].Error == "" && len(r.Schemes[i].Series.MeanBytes) > 0 {
			rows = append(rows, &r.Schemes[i])
		}
	}
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
	sampleMs := r.Setup.SampleUs / 1000

	plots := make([][]*plot.Plot, len(rows))
	for i, s := range rows {
		full, err := seriesPlot(s, r.Setup.MeasureS, yMax, kTail, kAvg)
		if err != nil {
			return err
		}
		zoom, err := zoomPlot(s, sampleMs, yMax, kTail, kAvg)
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
		fmt.Sprintf("bottleneck queue (KB) per scheme at %s; dashed red: K_tail = %.1f KB (= aqm.Tune's ins_target), green: K_avg = %.1f KB (= its pst_target); light: 10 ms maxima",
			rateText(r.Setup.RateBps), kTail, kAvg))
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

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		f.Close()
		return fmt.Errorf("plot: write %s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func seriesPlot(s *Result, measureS, yMax, kTail, kAvg float64) (*plot.Plot, error) {
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
	if err := addRefs(p, 0, end, kTail, kAvg); err != nil {
		return nil, err
	}
	p.X.Min, p.X.Max = 0, end
	return p, nil
}

func zoomPlot(s *Result, sampleMs, yMax, kTail, kAvg float64) (*plot.Plot, error) {
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
	if err := addRefs(p, 0, end, kTail, kAvg); err != nil {
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

func addRefs(p *plot.Plot, x0, x1, kTail, kAvg float64) error {
	for _, r := range []struct {
		y float64
		c color.Color
	}{{kTail, colKTail}, {kAvg, colKAvg}} {
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
