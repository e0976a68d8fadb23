//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/daemon"
	"github.com/fabriclab/fabriclab/host/lab"
)

// PortsDaemon is fabriclabd's side of many ports (issue 28: "metrics
// still fast"): host/daemon applying a configuration of Ports veth ports
// in one namespace (the measured port's device and the idle ones), its
// /metrics scrape with all of them and after a reload down to one.
type PortsDaemon struct {
	// ApplyS is the Apply of the configuration with every port: their
	// attach, one after the other, and the daemon's own start.
	ApplyS float64 `json:"apply_s"`
	// ReloadS is the Apply of the configuration with one port left: the
	// others detached.
	ReloadS float64 `json:"reload_s"`
	// Many and One are /metrics with every port and after the reload.
	Many Scrape `json:"scrape_many"`
	One  Scrape `json:"scrape_one"`
}

// Scrape is one /metrics scrape: its time (median of scrapeRounds), the
// samples it wrote, those of fabriclab_port_*, and its size.
type Scrape struct {
	Ms          float64 `json:"ms"`
	Samples     int     `json:"samples"`
	PortSamples int     `json:"port_samples"`
	Bytes       int     `json:"bytes"`
}

const scrapeRounds = 9

// portsDaemon runs the daemon over devs, every one a veth in node a.
func portsDaemon(a *lab.Node, devs []string) (res PortsDaemon, err error) {
	all, err := portsConfig(a, devs)
	if err != nil {
		return res, err
	}
	one, err := portsConfig(a, devs[:1])
	if err != nil {
		return res, err
	}
	d := daemon.New(daemon.Options{})
	defer func() {
		if derr := d.Drain(5 * time.Second); err == nil && derr != nil {
			err = derr
		}
	}()
	h := d.Handler()
	t := time.Now()
	if err := d.Apply(all); err != nil {
		return res, err
	}
	res.ApplyS = time.Since(t).Seconds()
	if res.Many, err = scrape(h); err != nil {
		return res, err
	}
	t = time.Now()
	if err := d.Apply(one); err != nil {
		return res, err
	}
	res.ReloadS = time.Since(t).Seconds()
	res.One, err = scrape(h)
	return res, err
}

// portsConfig is fabriclabd's configuration of a veth port on each of
// devs, as its YAML would say it.
func portsConfig(a *lab.Node, devs []string) (*daemon.Config, error) {
	var y strings.Builder
	y.WriteString("metrics:\n  listen: \"off\"\nports:\n")
	for _, dev := range devs {
		fmt.Fprintf(&y, "  - {dev: %s, netns: %s, mode: veth, rate: 10gbit}\n", dev, a.NetnsName)
	}
	return daemon.Parse("ports.yaml", []byte(y.String()))
}

// scrape times scrapeRounds GETs of /metrics and counts the last one's
// samples.
func scrape(h http.Handler) (Scrape, error) {
	var sc Scrape
	var times []float64
	var body []byte
	for range scrapeRounds {
		rec := httptest.NewRecorder()
		t := time.Now()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		times = append(times, float64(time.Since(t).Microseconds())/1e3)
		if rec.Code != http.StatusOK {
			return sc, fmt.Errorf("/metrics: status %d: %s", rec.Code, rec.Body.Bytes())
		}
		body = rec.Body.Bytes()
	}
	lines := bufio.NewScanner(bytes.NewReader(body))
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		l := lines.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		sc.Samples++
		if strings.HasPrefix(l, "fabriclab_port_") {
			sc.PortSamples++
		}
	}
	slices.Sort(times)
	sc.Ms, sc.Bytes = times[len(times)/2], len(body)
	return sc, lines.Err()
}
