module github.com/fabriclab/fabriclab

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0 // indirect
	github.com/florianl/go-tc v0.4.8 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/gopacket/gopacket v1.7.7 // indirect
	github.com/josharian/native v1.1.0 // indirect
	github.com/mdlayher/netlink v1.11.2 // indirect
	github.com/mdlayher/socket v0.6.0 // indirect
	github.com/safchain/ethtool v0.7.0 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/net v0.55.0 // indirect
	golang.org/x/sync v0.20.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

tool github.com/cilium/ebpf/cmd/bpf2go
