package htsim

import "fmt"

// recordedTail is htsim's tail FCT / ideal for the lab's UET incasts in
// their own setting (reference/htsim.md's results; the Scaled mapping of
// 500 Mbit/s, base RTT 1 ms, MTU 4096, 2 MiB per sender, the same in
// BDPs at any time scale; the greatest of seeds 1–5): "deep" is the
// 67-BDP WRED queue marking from 1 to 2 BDP with an ACK per packet,
// "trim" the 1-BDP queue that trims. netns-tests asserts against it and
// the bench prints it where no htsim build is at hand.
var recordedTail = map[string]float64{
	"deep/8/nscc":  1.004,
	"deep/8/rccc":  1.003,
	"deep/8/both":  1.003,
	"trim/8/nscc":  1.015,
	"trim/8/rccc":  1.012,
	"trim/8/both":  1.012,
	"trim/16/nscc": 1.013,
	"trim/16/rccc": 1.012,
	"trim/16/both": 1.012,
}

// RecordedKey names a recorded incast: queue "deep" or "trim", senders
// → 1, cc nscc, rccc or both.
func RecordedKey(queue string, senders int, cc string) string {
	return fmt.Sprintf("%s/%d/%s", queue, senders, cc)
}

// RecordedTail is htsim's recorded tail FCT / ideal for key
// (RecordedKey), and whether there is one.
func RecordedTail(key string) (float64, bool) {
	v, ok := recordedTail[key]
	return v, ok
}
