//go:build linux

package main

import (
	"context"
	"errors"
	"strconv"

	"github.com/fabriclab/fabriclab/host/lab"
)

// iperfUDP runs one iperf3 -u -b 0 test a -> b with datagrams of dgram
// bytes of UDP payload: a one-off server in b, a JSON client in a.
func iperfUDP(ctx context.Context, a, b *lab.Node, port, seconds, dgram, cpu int) (UDPRun, error) {
	var run UDPRun
	type udpSum struct {
		Seconds       float64 `json:"seconds"`
		Bytes         uint64  `json:"bytes"`
		BitsPerSecond float64 `json:"bits_per_second"`
		LostPackets   uint64  `json:"lost_packets"`
		Packets       uint64  `json:"packets"`
		LostPercent   float64 `json:"lost_percent"`
	}
	var rep struct {
		iperfHead
		End struct {
			SumSent     udpSum `json:"sum_sent"`
			SumReceived udpSum `json:"sum_received"`
			CPU         struct {
				HostTotal   float64 `json:"host_total"`
				RemoteTotal float64 `json:"remote_total"`
			} `json:"cpu_utilization_percent"`
		} `json:"end"`
	}
	opts := []string{"-u", "-b", "0", "-l", strconv.Itoa(dgram)}
	if err := runIperf(ctx, a, b, port, seconds, cpu, opts, &rep); err != nil {
		return run, err
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
