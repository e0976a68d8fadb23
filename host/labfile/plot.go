//go:build linux

package labfile

import (
	"fmt"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/fabriclab/fabriclab/host/lab/figure"
)

// plot writes goodput.png (each flow's goodput per report interval, a step
// per interval), ports.png (each watched port's backlog at each report)
// and queues.png (the backlog of each port the flows cross, every 3 ms ×
// timescale) into dir, and returns their paths.
func (res *Result) plot(dir string) ([]string, error) {
	files, err := res.plotQueues(dir)
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

func addLine(p *plot.Plot, i int, name string, xy plotter.XYs) error {
	if len(xy) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xy)
	if err != nil {
		return fmt.Errorf("plot %s: %w", name, err)
	}
	l.Color = plotutil.Color(i)
	l.Width = vg.Points(1.5)
	p.Add(l)
	p.Legend.Add(name, l)
	p.Legend.Top = true
	return nil
}

func save(path string, p *plot.Plot) error {
	img := vgimg.New(8*vg.Inch, 4*vg.Inch)
	p.Draw(draw.New(img))
	return figure.SavePNG(path, img)
}
