#!/bin/bash
# Provision one VM of the Vagrant lab: install fabriclab with the project's
# own `make install`, address and route the VM as the lab file's plan says,
# and run fabriclabd on this node of the lab file.
#
#   provision.sh NODE KIND LAB_FILE GO_VERSION
#
# Idempotent: `vagrant provision` runs it again after a change to the
# repository or the lab file (fabriclabd is restarted).
set -euo pipefail
node=$1 kind=$2 lab=$3 go_version=$4
src=/fabriclab

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq make ca-certificates curl iproute2 ethtool tcpdump >/dev/null

# Go, as go.mod asks (Debian's is older).
if ! /usr/local/go/bin/go version 2>/dev/null | grep -q "go${go_version} "; then
	arch=$(dpkg --print-architecture)
	curl -fsSL "https://go.dev/dl/go${go_version}.linux-${arch}.tar.gz" -o /tmp/go.tgz
	rm -rf /usr/local/go && tar -C /usr/local -xzf /tmp/go.tgz && rm /tmp/go.tgz
fi
export PATH=/usr/local/go/bin:$PATH

# The project's install: binaries, the unit, /etc/fabriclab/fabriclabd.yaml.
make -C "$src" install GO=/usr/local/go/bin/go

# Addresses, routes, forwarding and offloads of this node, from the plan
# (the same rule `fabriclab run` uses in namespaces), and netem for the
# delay and loss of its links (a VM's kernel has netem).
fabriclab plan "$lab" --node "$node" --apply

# fabriclabd runs this node of the lab file: a switch's ports on its NICs
# in virtual-queue mode, a host's RoCEv2 and UET servers and its flows.
cat >/etc/fabriclab/fabriclabd.yaml <<CONF
# Written by vagrant/provision.sh: node $node ($kind) of $lab.
log: {level: info}
metrics: {listen: "0.0.0.0:9471"}
lab:
  file: $lab
  node: $node
CONF
fabriclabd -check -config /etc/fabriclab/fabriclabd.yaml
systemctl enable fabriclabd >/dev/null
systemctl restart fabriclabd
for _ in $(seq 50); do
	if curl -fs localhost:9471/healthz >/dev/null; then
		echo "$node: fabriclabd is up: curl localhost:9471/metrics"
		exit 0
	fi
	sleep 0.2
done
journalctl -u fabriclabd --no-pager -n 30
exit 1
