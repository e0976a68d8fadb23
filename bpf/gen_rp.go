package bpf

//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -nostdinc -Iinclude" -type rp_qp -type rp_slot -type rp_stats -type rp_ppfc_key -type rp_ppfc_event -type rp_ppfc_slot Rp rp.c
