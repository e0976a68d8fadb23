//go:build race

package main

// raceDetector: the race detector slows the in-process server about
// tenfold; the binary client gets more time to recover from its drops.
const raceDetector = true
