// Package bpf holds the switch-port eBPF programs and their generated Go
// bindings. The C sources compile only under `make generate`, with the clang
// the Makefile pins (BPF2GO_CC, BPF2GO_STRIP); the generated .go and .o files
// are committed so that `go build` needs no clang.
package bpf

//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -nostdinc -Iinclude" -type port_config -type ecn_mode -type class_config -type class_state -type class_stats -type port_stats -type aqm_state -type xmit_handoff -type ppfc_key -type wan_cnp_key -type ppfc_source -type idle_event -type link_state Port port.c
