//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
)

// SectionHost is what the kernel accounted the machine took from one
// section (host/hostlost.Kernel), this process's threads and its children's
// as one: the goodput rows run their tools as child processes.
type SectionHost struct {
	Section string          `json:"section"`
	Seconds float64         `json:"seconds"`
	Kernel  hostlost.Kernel `json:"kernel"`
}

// hostMeter reads the kernel's accounting around each section.
type hostMeter struct {
	rep  *Report
	name string
	k0   hostlost.Kernel
	t0   time.Time
}

func (h *hostMeter) begin(name string) {
	h.name, h.t0 = name, time.Now()
	h.k0, _ = hostlost.ReadKernel(os.Getpid())
}

func (h *hostMeter) end() {
	k1, err := hostlost.ReadKernel(os.Getpid())
	if err != nil {
		progress("host figures of %s: %v", h.name, err)
	}
	h.rep.Host = append(h.rep.Host, SectionHost{Section: h.name, Seconds: time.Since(h.t0).Seconds(), Kernel: k1.Sub(h.k0)})
}

// printHost writes each section's host figures, a line each.
func printHost(w io.Writer, rows []SectionHost) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\nhost during each section (the kernel's accounting: run delay of the bench's threads, of the softirq threads, steal,")
	fmt.Fprintln(w, "net_rx_action runs cut short, per-CPU backlog drops; the tools the goodput rows run are processes of their own):")
	for _, r := range rows {
		k := r.Kernel
		fmt.Fprintf(w, "  %-10s %5.0f s: run delay %v, softirq threads %v, steal %v, %d squeezed, %d backlog drops\n",
			r.Section, r.Seconds, k.RunDelay.Round(time.Millisecond), k.SoftirqDelay.Round(time.Millisecond), k.Steal.Round(time.Millisecond), k.Squeezed, k.BacklogDrops)
	}
}

// printDelay writes the delay section's rows.
func printDelay(w io.Writer, d *DelayReport) {
	if d == nil || len(d.Rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\ndelay link (host/lab/link, %s one way): iperf3 -u -b 0 for %d s, what it sent on the bare path vs the forwarder's releases\n", d.Delay, d.Seconds)
	for _, r := range d.Rows {
		fmt.Fprintf(w, "  %4d-byte packets: bare path %.0f kpps sent, delay link %.0f kpps released (%.2f of bare; %d dropped at its limit, %d at the TUN); goal >= %.0f kpps: %s\n",
			r.IPBytes, r.BareKpps, r.DelayKpps, r.Ratio, r.QueueFull, r.TunDropped, r.GoalKpps, r.Verdict)
	}
}
