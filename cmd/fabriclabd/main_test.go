package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("servers:\n  - {transport: rocev2, port: 0x10000}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"-check", "-config", "fabriclabd.yaml"}, 0, "ok\n", ""},
		{[]string{"-check", "-config", bad}, 1, "", `bad.yaml:2: servers[0].port: "65536": must be 1..65535`},
		{[]string{"-check", "-config", filepath.Join(dir, "none.yaml")}, 1, "", "no such file"},
		{[]string{"-h"}, 0, "usage: fabriclabd", ""},
		{[]string{"-bogus"}, 2, "", "flag provided but not defined: -bogus"},
		{[]string{"extra"}, 2, "", `unexpected argument "extra"`},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errb.String(), c.err) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d, %q, %q", c.args, code, out.String(), errb.String(), c.code, c.out, c.err)
		}
	}
}
