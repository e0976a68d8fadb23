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

var (
	colCore  = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	colCore2 = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	colPE    = color.RGBA{R: 44, G: 160, B: 44, A: 255}
	colT1    = color.RGBA{R: 148, G: 103, B: 189, A: 255}
	colT2    = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	// One colour per scheme in the FCT plot, in schemeNames' order.
	schemeColors = []color.Color{colT2, colCore, colPE}
)

// firstRuns is each scheme's first successful run, in schemeNames' order.
func firstRuns(r *Report) []*Result {
	var rows []*Result
	for _, n := range schemeNames {
		for i := range r.Schemes {
			s := &r.Schemes[i]
			if s.Scheme == n && s.Error == "" && len(s.Series) > 0 {
				rows = append(rows, s)
				break
			}
		}
	}
	return rows
}

// writeQueuePlot draws wan-queue.png: one panel per scheme (its first run,
// one y scale), the WAN port's backlog over time (5 ms maxima), c2's and
// PE1's where the scheme has them, and t1 and t2.
func writeQueuePlot(path string, r *Report) error {
	rows := firstRuns(r)
	if len(rows) == 0 {
		return fmt.Errorf("plot: no run has queue samples")
	}
	yMax := float64(r.Setup.T2Max) / 1000
	for _, s := range rows {
		for _, p := range s.Series {
			yMax = max(yMax, p[1], p[2], p[3])
		}
	}
	yMax *= 1.05
	plots := make([][]*plot.Plot, len(rows))
	for i, s := range rows {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s (run %d)", s.Label, s.Run)
		p.X.Label.Text = "time since the long flows' start (s)"
		p.Y.Label.Text = "backlog (KB)"
		p.Y.Min, p.Y.Max = 0, yMax
		p.Add(plotter.NewGrid())
		x1 := (s.Series[len(s.Series)-1][0] + s.SeriesEveryMs) / 1000
		for _, ref := range []struct {
			kb  float64
			c   color.Color
			txt string
		}{{float64(r.Setup.T1) / 1000, colT1, "t1"}, {float64(r.Setup.T2) / 1000, colT2, "t2"}} {
			if err := addLine(p, plotter.XYs{{X: 0, Y: ref.kb}, {X: x1, Y: ref.kb}}, ref.c, []vg.Length{vg.Points(4), vg.Points(3)}, ref.txt); err != nil {
				return err
			}
		}
		for k, q := range []struct {
			c   color.Color
			txt string
			has bool
		}{{colCore, "WAN port (c1)", true}, {colCore2, "c2", s.Core2QueueKB != nil}, {colPE, "PE1 buffer", s.PEQueueKB != nil}} {
			if !q.has {
				continue
			}
			pts := make(plotter.XYs, len(s.Series))
			for j, v := range s.Series {
				pts[j] = plotter.XY{X: v[0] / 1000, Y: v[k+1]}
			}
			if err := addLine(p, pts, q.c, nil, q.txt); err != nil {
				return err
			}
		}
		p.Y.Min, p.Y.Max = 0, yMax
		plots[i] = []*plot.Plot{p}
	}
	img := vgimg.NewWith(vgimg.UseWH(28*vg.Centimeter, vg.Length(len(rows))*7*vg.Centimeter), vgimg.UseDPI(110))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadX: vg.Centimeter, PadY: vg.Centimeter / 2,
		PadTop: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4, PadLeft: vg.Centimeter / 4, PadRight: vg.Centimeter / 2}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	return figure.SavePNG(path, img)
}

func addLine(p *plot.Plot, pts plotter.XYs, c color.Color, dashes []vg.Length, legend string) error {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	l.Color, l.Width, l.Dashes = c, vg.Points(1), dashes
	p.Add(l)
	p.Legend.Add(legend, l)
	p.Legend.Top = true
	return nil
}

// writeFCTPlot draws wan-fct.png: the short WRITEs' FCT CDF per scheme,
// all runs pooled.
func writeFCTPlot(path string, r *Report) error {
	p := plot.New()
	p.Title.Text = "short WRITE completion time (post to ACK), all runs"
	p.X.Label.Text = "FCT (ms)"
	p.Y.Label.Text = "fraction of WRITEs"
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = false, false
	n := 0
	for i, name := range schemeNames {
		var all []float64
		for j := range r.Schemes {
			if s := &r.Schemes[j]; s.Scheme == name && s.Error == "" {
				all = append(all, s.ShortFCTs...)
			}
		}
		if len(all) == 0 {
			continue
		}
		slices.Sort(all)
		pts := make(plotter.XYs, len(all))
		for k, v := range all {
			pts[k] = plotter.XY{X: v / 1000, Y: float64(k+1) / float64(len(all))}
		}
		if err := addLine(p, pts, schemeColors[i%len(schemeColors)], nil, fmt.Sprintf("%s (n=%d)", schemeLabels[name], len(all))); err != nil {
			return err
		}
		n++
	}
	p.Legend.Top = false
	p.Y.Min, p.Y.Max = 0, 1
	img := vgimg.NewWith(vgimg.UseWH(20*vg.Centimeter, 12*vg.Centimeter), vgimg.UseDPI(110))
	p.Draw(draw.New(img))
	return figure.SavePNG(path, img)
}
