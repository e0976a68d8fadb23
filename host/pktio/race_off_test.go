//go:build !race

package pktio

const raceEnabled = false
