//go:build race

package pktio

// raceEnabled: the race detector makes sync.Pool drop items at random and
// adds allocations, so allocation counts are logged but not checked.
const raceEnabled = true
