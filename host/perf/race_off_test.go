//go:build !race

package perf

const raceDetector = false
