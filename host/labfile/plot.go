//go:build linux

package labfile

import (
	"fmt"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/fabriclab/fabriclab/host/lab/figure"
)

// plot writes goodput.png (each flow's goodput per report interval, a step
// per interval), ports.png (each watched port's backlog at each report),
// queues.png (the backlog of each port the flows cross, every 3 ms ×
// timescale) and, with rocev2 flows under DCQCN, dcqcn.png (plotDCQCN)
// into dir, and returns their paths.
func (res *Result) plot(dir string) ([]string, error) {
	files, err := res.plotQueues(dir)
	if err != nil {
		return files, err
	}
	dcqcn, err := res.plotDCQCN(dir)
	files = append(files, dcqcn...)
	if err != nil || len(res.Samples) < 2 {
		return files, err
	}
	gp := plot.New()
	gp.Title.Text = res.Name + ": goodput per flow over each of its report intervals"
	gp.X.Label.Text, gp.Y.Label.Text = "s", "Mbit/s"
	for i, f := range res.Flows {
		// The flow's own intervals, placed at its start: finer than the
		// samples, which see a flow shorter than an interval not at all.
		var xy plotter.XYs
		if f.Report != nil {
			for _, iv := range f.Report.Intervals {
				xy = append(xy, plotter.XY{X: f.StartS + iv.Sum.Start, Y: iv.Sum.BitsPerSecond / 1e6},
					plotter.XY{X: f.StartS + iv.Sum.End, Y: iv.Sum.BitsPerSecond / 1e6})
			}
		}
		if err := addLine(gp, i, f.Name, xy); err != nil {
			return nil, err
		}
	}
	path := filepath.Join(dir, "goodput.png")
	if err := save(path, gp); err != nil {
		return nil, err
	}
	files = append(files, path)

	if len(res.Samples[0].Ports) == 0 {
		return files, nil
	}
	qp := plot.New()
	qp.Title.Text = res.Name + ": backlog of the watched ports, each report interval"
	qp.X.Label.Text, qp.Y.Label.Text = "s", "KB"
	for j, p := range res.Samples[0].Ports {
		var xy plotter.XYs
		for _, s := range res.Samples {
			if j < len(s.Ports) {
				xy = append(xy, plotter.XY{X: s.T, Y: float64(s.Ports[j].BacklogBytes) / 1e3})
			}
		}
		if err := addLine(qp, j, p.Name, xy); err != nil {
			return nil, err
		}
	}
	path = filepath.Join(dir, "ports.png")
	if err := save(path, qp); err != nil {
		return files, err
	}
	return append(files, path), nil
}

// plotQueues writes queues.png: the backlog of each port the flows cross,
// as the queue sampler read it (PortResult.QueueP50Bytes's samples), in
// KB over seconds since the run's start.
func (res *Result) plotQueues(dir string) ([]string, error) {
	qp := plot.New()
	qp.Title.Text = res.Name + ": backlog of the ports the flows cross, every 3 ms"
	qp.X.Label.Text, qp.Y.Label.Text = "s", "KB"
	lines := 0
	for _, p := range res.Ports {
		if len(p.queue) < 2 {
			continue
		}
		xy := make(plotter.XYs, len(p.queue))
		for i, s := range p.queue {
			xy[i] = plotter.XY{X: s.at.Seconds(), Y: float64(s.bytes) / 1e3}
		}
		if err := addLine(qp, lines, p.Name, xy); err != nil {
			return nil, err
		}
		lines++
	}
	if lines == 0 {
		return nil, nil
	}
	path := filepath.Join(dir, "queues.png")
	if err := save(path, qp); err != nil {
		return nil, err
	}
	return []string{path}, nil
}

// addLine draws xy in the i-th colour, named in the legend.
func addLine(p *plot.Plot, i int, name string, xy plotter.XYs) error {
	p.Legend.Top = true
	return addStyledLine(p, i, name, xy, nil)
}

func save(path string, p *plot.Plot) error {
	img := vgimg.New(8*vg.Inch, 4*vg.Inch)
	p.Draw(draw.New(img))
	return figure.SavePNG(path, img)
}

// zoomS is the DCQCN plot's zoom window on the fabric's clock: a few
// cuts and recoveries of each flow at the trace's 3 ms.
const zoomS = 0.5

// plotDCQCN writes dcqcn.png (the demo's figure): each rocev2 flow's
// goodput (per report interval) and Rc, its α, the watched ports'
// backlog, and a zoom of zoomS (× timescale) once all the traced flows
// run, where each cut and recovery shows against the queue.
func (res *Result) plotDCQCN(dir string) ([]string, error) {
	tr := res.DCQCN
	if tr == nil || len(tr.Samples) < 2 {
		return nil, nil
	}
	end := tr.Samples[len(tr.Samples)-1].T
	rates := newPanel(res.Name+": goodput per report interval (solid) and DCQCN's Rc (dashed)", "Mbit/s")
	alpha := newPanel("α, each sender's congestion estimate (a CNP cuts Rc by α/2)", "α")
	alpha.Y.Min, alpha.Y.Max = 0, 1.05
	queue := newPanel(fmt.Sprintf("backlog of the ports the flows cross, every %.0f ms", 1e3*tr.PeriodS), "KB")
	from, to := zoomWindow(tr, zoomS*tr.PeriodS/incastSample.Seconds())
	zoom := newPanel(fmt.Sprintf("zoom, t = %.2f-%.2f s: Rc (Mbit/s) and the backlog (KB, dotted)", from, to), "Mbit/s")
	dashed := []vg.Length{vg.Points(3), vg.Points(2)}
	for i, name := range tr.Flows {
		var rc, al, zrc plotter.XYs
		for _, s := range tr.Samples {
			if s.RcBps[i] == 0 {
				continue
			}
			p := plotter.XY{X: s.T, Y: float64(s.RcBps[i]) / 1e6}
			rc = append(rc, p)
			al = append(al, plotter.XY{X: s.T, Y: s.Alpha[i]})
			if s.T >= from && s.T <= to {
				zrc = append(zrc, p)
			}
		}
		var good plotter.XYs
		if j := slices.IndexFunc(res.Flows, func(f FlowResult) bool { return f.Name == name }); j >= 0 && res.Flows[j].Report != nil {
			f := &res.Flows[j]
			for _, iv := range f.Report.Intervals {
				good = append(good, plotter.XY{X: f.StartS + iv.Sum.Start, Y: iv.Sum.BitsPerSecond / 1e6},
					plotter.XY{X: f.StartS + iv.Sum.End, Y: iv.Sum.BitsPerSecond / 1e6})
			}
		}
		for _, l := range []struct {
			p    *plot.Plot
			xy   plotter.XYs
			dash []vg.Length
			name string
		}{{rates, good, nil, name}, {rates, rc, dashed, ""}, {alpha, al, nil, name}, {zoom, zrc, nil, name}} {
			if err := addStyledLine(l.p, i, l.name, l.xy, l.dash); err != nil {
				return nil, err
			}
		}
	}
	// The zoom's backlog shares the rate axis, in KB, dotted.
	lines := len(tr.Flows)
	for _, p := range res.Ports {
		if len(p.queue) < 2 {
			continue
		}
		var xy, zq plotter.XYs
		for _, s := range p.queue {
			q := plotter.XY{X: s.at.Seconds(), Y: float64(s.bytes) / 1e3}
			xy = append(xy, q)
			if q.X >= from && q.X <= to {
				zq = append(zq, q)
			}
		}
		if err := addStyledLine(queue, lines, p.Name, xy, nil); err != nil {
			return nil, err
		}
		if err := addStyledLine(zoom, lines, p.Name+" (KB)", zq, []vg.Length{vg.Points(1), vg.Points(1)}); err != nil {
			return nil, err
		}
		lines++
	}
	for _, p := range []*plot.Plot{rates, alpha, queue} {
		p.X.Min, p.X.Max = 0, end
	}
	img := vgimg.New(10*vg.Inch, 12*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 4, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(6), PadY: vg.Points(10)}
	canvases := plot.Align([][]*plot.Plot{{rates}, {alpha}, {queue}, {zoom}}, tiles, dc)
	for i, p := range []*plot.Plot{rates, alpha, queue, zoom} {
		p.Draw(canvases[i][0])
	}
	path := filepath.Join(dir, "dcqcn.png")
	if err := figure.SavePNG(path, img); err != nil {
		return nil, err
	}
	return []string{path}, nil
}

// zoomWindow is the zoom's [from, to] of length span: 2 spans after the
// first sample in which every traced flow runs, or at the trace's middle
// when that leaves no room.
func zoomWindow(tr *DCQCNTrace, span float64) (from, to float64) {
	last := tr.Samples[len(tr.Samples)-1].T
	from = tr.Samples[len(tr.Samples)/2].T
	for _, s := range tr.Samples {
		if !slices.Contains(s.RcBps, 0) {
			if s.T+3*span <= last {
				from = s.T + 2*span // past the last join's first cuts
			}
			break
		}
	}
	return from, min(from+span, last)
}

func newPanel(title, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text, p.Y.Label.Text = "s", y
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

// addStyledLine is addLine with a dash pattern; a line without a name
// stays out of the legend, one without points out of the plot.
func addStyledLine(p *plot.Plot, i int, name string, xy plotter.XYs, dashes []vg.Length) error {
	if len(xy) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xy)
	if err != nil {
		return fmt.Errorf("plot %s: %w", name, err)
	}
	l.Color = plotutil.Color(i)
	l.Width = vg.Points(1.5)
	l.Dashes = dashes
	p.Add(l)
	if name != "" {
		p.Legend.Add(name, l)
	}
	return nil
}
