//go:build race

package perf

// raceDetector: the race detector slows the agents about tenfold, so the
// netns tests relax their timing and rate checks.
const raceDetector = true
