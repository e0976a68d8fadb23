package bpf

//go:generate go tool bpf2go -no-global-types -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -nostdinc -Iinclude" -type dctcp_flow_key -type dctcp_flow -type dctcp_stats -type dctcp_event -type dctcp_event_kind Dctcp dctcp.c
