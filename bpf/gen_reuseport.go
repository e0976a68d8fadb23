package bpf

//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -nostdinc -Iinclude" -type steer_stats -type steer_owner -type ppfc_src_key Reuseport reuseport.c
