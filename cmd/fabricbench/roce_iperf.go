//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
)

// iperfUDP runs one iperf3 -u -b 0 test a -> b with datagrams of dgram
// bytes of UDP payload: a one-off server in b, a JSON client in a.
func iperfUDP(ctx context.Context, a, b *lab.Node, port, seconds, dgram, cpu int) (UDPRun, error) {
	var run UDPRun
	rctx, cancel := context.WithTimeout(ctx, time.Duration(seconds+20)*time.Second)
	defer cancel()

	srv, affinity, err := iperfServer(rctx, b, port, cpu)
	if err != nil {
		return run, err
	}
	defer srv.finish(3 * time.Second)

	out, stderr, runErr := runClient(rctx, a, "iperf3", append([]string{"-c", addrB.Addr().String(), "-p", strconv.Itoa(port),
		"-u", "-b", "0", "-l", strconv.Itoa(dgram), "-t", strconv.Itoa(seconds), "-J"}, affinity...)...)
	type udpSum struct {
		Seconds       float64 `json:"seconds"`
		Bytes         uint64  `json:"bytes"`
		BitsPerSecond float64 `json:"bits_per_second"`
		LostPackets   uint64  `json:"lost_packets"`
		Packets       uint64  `json:"packets"`
		LostPercent   float64 `json:"lost_percent"`
	}
	var rep struct {
		Error string `json:"error"`
		End   struct {
			SumSent     udpSum `json:"sum_sent"`
			SumReceived udpSum `json:"sum_received"`
			CPU         struct {
				HostTotal   float64 `json:"host_total"`
				RemoteTotal float64 `json:"remote_total"`
			} `json:"cpu_utilization_percent"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		if runErr != nil {
			return run, fmt.Errorf("iperf3 client: %w (stderr: %s)", runErr, strings.TrimSpace(stderr))
		}
		return run, fmt.Errorf("iperf3 client output: %w", err)
	}
	if rep.Error != "" {
		return run, fmt.Errorf("iperf3 client: %s", rep.Error)
	}
	if runErr != nil {
		return run, fmt.Errorf("iperf3 client: %w", runErr)
	}
	e := &rep.End
	if e.SumReceived.BitsPerSecond <= 0 || e.SumSent.Packets == 0 || e.SumSent.Seconds <= 0 {
		return run, errors.New("iperf3 reported no end.sum_received.bits_per_second or no packets sent")
	}
	run.GoodputGbps = e.SumReceived.BitsPerSecond / 1e9
	run.SentPackets = e.SumSent.Packets
	run.Seconds = e.SumSent.Seconds
	run.SenderCPUSeconds = e.CPU.HostTotal / 100 * e.SumSent.Seconds
	if run.SenderCPUSeconds > 0 {
		run.PPSPerCore = float64(run.SentPackets) / run.SenderCPUSeconds
	}
	run.ReceiverCPUPct = e.CPU.RemoteTotal
	run.LossPct = e.SumReceived.LostPercent
	return run, nil
}
