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
	// ScrapeMs is one /metrics scrape's time (median of scrapeRounds)
	// with every port and with one; Series the lines of samples it
	// wrote, PortSeries those of fabriclab_port_*.
	ScrapeMsMany    float64 `json:"scrape_ms_many"`
	SeriesMany      int     `json:"series_many"`
	PortSeriesMany  int     `json:"port_series_many"`
	ScrapeBytesMany int     `json:"scrape_bytes_many"`
	ScrapeMsOne     float64 `json:"scrape_ms_one"`
	SeriesOne       int     `json:"series_one"`
	PortSeriesOne   int     `json:"port_series_one"`
	// ReloadS is the Apply of the configuration with one port left: the
	// others detached.
	ReloadS float64 `json:"reload_s"`
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
	if res.ScrapeMsMany, res.SeriesMany, res.PortSeriesMany, res.ScrapeBytesMany, err = scrape(h); err != nil {
		return res, err
	}
	t = time.Now()
	if err := d.Apply(one); err != nil {
		return res, err
	}
	res.ReloadS = time.Since(t).Seconds()
	res.ScrapeMsOne, res.SeriesOne, res.PortSeriesOne, _, err = scrape(h)
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
func scrape(h http.Handler) (ms float64, series, portSeries, size int, err error) {
	var times []float64
	var body []byte
	for range scrapeRounds {
		rec := httptest.NewRecorder()
		t := time.Now()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		times = append(times, float64(time.Since(t).Microseconds())/1e3)
		if rec.Code != http.StatusOK {
			return 0, 0, 0, 0, fmt.Errorf("/metrics: status %d: %s", rec.Code, rec.Body.Bytes())
		}
		body = rec.Body.Bytes()
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		series++
		if strings.HasPrefix(l, "fabriclab_port_") {
			portSeries++
		}
	}
	slices.Sort(times)
	return times[len(times)/2], series, portSeries, len(body), sc.Err()
}
