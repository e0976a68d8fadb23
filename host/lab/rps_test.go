//go:build linux

package lab

import "testing"

func TestCPUMask(t *testing.T) {
	for cpu, want := range map[int]string{0: "00000001", 1: "00000002", 31: "80000000", 32: "00000001,00000000", 65: "00000002,00000000,00000000"} {
		if got := cpuMask(cpu); got != want {
			t.Errorf("cpuMask(%d) = %s, want %s", cpu, got, want)
		}
	}
}
