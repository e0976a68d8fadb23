package bpf

//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -nostdinc -Iinclude" -type pe_config -type route_prefix -type encap_route -type pe_stats -type decap_event -type cnp_event -type pe_congestion -type decap_cell -type encap_ecn_mode Tunnel tunnel.c
