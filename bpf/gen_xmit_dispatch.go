package bpf

//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -nostdinc -Iinclude" -type xmit_dev -type xmit_owner -type xmit_dispatch_stats XmitDispatch xmit_dispatch.c
