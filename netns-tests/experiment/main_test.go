//go:build linux

package main

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// A panic in one of the tool's goroutines becomes an error and cancels the
// run, so the lab is still torn down.
func TestGroupRecoversPanics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := group{cancel: cancel}
	g.Go(func() error { panic("boom") })
	g.Go(func() error { <-ctx.Done(); return nil })
	err := g.Wait()
	if err == nil || !strings.Contains(err.Error(), "panic: boom") {
		t.Fatalf("Wait = %v, want the panic as an error", err)
	}
	if ctx.Err() == nil {
		t.Error("the panic did not cancel the run")
	}
	var g2 group
	g2.Go(func() error { return errors.New("first") })
	g2.Wait()
	g2.Go(func() error { return errors.New("second") })
	if err := g2.Wait(); err == nil || err.Error() != "first" {
		t.Errorf("Wait = %v, want the first error", err)
	}
}

func TestReportNotes(t *testing.T) {
	r := &Report{LoadStart: "1.00 1.00 1.00", LoadEnd: "2.00 1.00 1.00", Setup: Setup{Congestion: "cubic", CongestionName: "cubic"},
		DelayLinks: []DelayReport{
			{Sender: "s1", DelayUs: 400, Packets: 100, LatenessP99Us: 20},                       // on time
			{Sender: "s2", DelayUs: 900, Packets: 100, LatenessP99Us: 524, LatenessMaxUs: 9000}, // late
			{Sender: "s3", DelayUs: 1400, Packets: 98, Dropped: 2, LatenessP99Us: 100},
		},
		Schemes: []Result{{Scheme: Scheme{Label: "TCN"}, ShortFailed: 3,
			Long: []LongFlow{{ECN: true, Congestion: "cubic"}, {ECN: false, Congestion: "bbr"}}}},
	}
	notes := strings.Join(reportNotes(r), "\n")
	for _, want := range []string{"load average 1.00 1.00 1.00 at start, 2.00 1.00 1.00 at end",
		"s2 p99 < 524 µs, max 9000 µs", "dropped packets (s3 2 of 100)",
		"TCN: 1 long flows without ECN, 1 not cubic", "TCN: 3 short flows failed"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, "s1 p99") {
		t.Errorf("an on-time delay link got a note:\n%s", notes)
	}
}
