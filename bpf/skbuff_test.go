package bpf

import (
	"testing"
	"unsafe"
)

func TestSkBuffSize(t *testing.T) {
	if s := unsafe.Sizeof(SkBuff{}); s != 192 {
		t.Fatalf("SkBuff is %d bytes, __sk_buff 192", s)
	}
}
