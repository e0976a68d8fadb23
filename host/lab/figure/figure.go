// Package figure writes gonum/plot canvases: the experiments' and fabriclab's.
package figure

import (
	"bufio"
	"fmt"
	"os"

	"gonum.org/v1/plot/vg/vgimg"
)

// SavePNG writes img to path as a PNG.
func SavePNG(path string, img *vgimg.Canvas) error {
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
