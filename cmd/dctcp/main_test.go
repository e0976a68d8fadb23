package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/dctcp"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
)

func TestBadOptions(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-g", "11"}, "dctcp_shift_g 11 out of range [0, 10]"},
		{[]string{"-alpha-init", "2000"}, "dctcp_alpha_on_init 2000 out of range [0, 1024]"},
		{[]string{"-interval", "-1s"}, "-interval (-1s) must be 0 or more"},
		{[]string{"-bogus"}, "flag provided but not defined"},
	} {
		var out, errs bytes.Buffer
		if code := run(tc.args, &out, &errs); code != exitUsage || !strings.Contains(errs.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, code, errs.String(), exitUsage, tc.want)
		}
	}
	var out, errs bytes.Buffer
	if code := run([]string{"-help"}, &out, &errs); code != exitOK || !strings.Contains(errs.String(), "iperf3 -C NAME") {
		t.Errorf("-help: exit %d, %q", code, errs.String())
	}
}

// TestRunCommand: the name is registered while the command runs, the
// command's exit status is dctcp's, and nothing stays registered.
func TestRunCommand(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, "6.4")
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "dctcp_" + hex.EncodeToString(b[:])
	var out, errs bytes.Buffer
	code := run([]string{"-name", name, "--", "sh", "-c", "grep -qw " + name + " /proc/sys/net/ipv4/tcp_available_congestion_control"}, &out, &errs)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	if code := run([]string{"-name", name, "--", "sh", "-c", "exit 3"}, &out, &errs); code != 3 {
		t.Errorf("a command that exits 3: dctcp exits %d", code)
	}
	for range 100 {
		if !slices.Contains(dctcp.Available(), name) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("%s still registered after dctcp returned", name)
}

func TestRenderFlows(t *testing.T) {
	var b bytes.Buffer
	renderFlows(&b, []dctcp.Flow{{Alpha: 512, Windows: 4, AlphaSum: 2048, Delivered: 100, DeliveredCE: 25, Cwnd: 10, SSThresh: 0x7fffffff}})
	for _, want := range []string{"1 connections", "0.500", "0.2500", "inf"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}
