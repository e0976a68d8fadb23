package perf

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The command line's numbers, spelled as iperf3 takes them.

// ParseBytes parses an iperf3 byte count (-n, -l): a number with an
// optional K, M, G or T suffix, 1024-based as iperf3's ("10M" is
// 10485760); "KB", "MB", "GB" (tc's spelling) mean the same. Fractions are
// allowed ("1.5M") and truncated to whole bytes.
func ParseBytes(s string) (uint64, error) {
	num, suffix := splitSuffix(s)
	var mult uint64 = 1
	switch strings.ToUpper(suffix) {
	case "":
	case "K", "KB":
		mult = 1 << 10
	case "M", "MB":
		mult = 1 << 20
	case "G", "GB":
		mult = 1 << 30
	case "T", "TB":
		mult = 1 << 40
	default:
		return 0, fmt.Errorf("unknown unit %q (want K, M, G or T, 1024-based)", suffix)
	}
	return scale(num, mult)
}

// ParseBitrate parses an iperf3 rate (-b): bits per second with an
// optional k, m, g or t suffix, 1000-based as iperf3's ("10G" is 10^10),
// or a tc rate with its unit ("10gbit", "100mbit").
func ParseBitrate(s string) (units.Rate, error) {
	num, suffix := splitSuffix(s)
	var mult uint64 = 1
	switch strings.ToLower(suffix) {
	case "":
	case "k":
		mult = 1e3
	case "m":
		mult = 1e6
	case "g":
		mult = 1e9
	case "t":
		mult = 1e12
	default:
		r, err := units.ParseRate(s)
		if err != nil {
			if amb := (*units.AmbiguousRateError)(nil); errors.As(err, &amb) {
				return 0, err // it names its own fix
			}
			return 0, fmt.Errorf("want bits/s with an optional k, m, g suffix (1000-based) or a tc rate like 10gbit")
		}
		return r, nil
	}
	v, err := scale(num, mult)
	return units.Rate(v), err
}

// ParseSeconds parses an iperf3 time (-t, -i, -O): seconds as a decimal
// number ("10", "0.5"), or a time with a unit ("500ms", "2s", "100us").
func ParseSeconds(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	num, suffix := splitSuffix(s)
	if suffix == "" {
		v, err := scale(num, uint64(time.Second))
		if err != nil {
			return 0, err
		}
		if v > math.MaxInt64 {
			return 0, fmt.Errorf("too long")
		}
		return time.Duration(v), nil
	}
	d, err := units.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("want seconds (10, 0.5) or a time with a unit (500ms, 2s)")
	}
	return d, nil
}

// splitSuffix splits "1.5M" into "1.5" and "M".
func splitSuffix(s string) (num, suffix string) {
	s = strings.TrimSpace(s)
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') && s[i-1] != '.' {
		i--
	}
	return s[:i], s[i:]
}

// scale returns num × mult, truncated, exactly.
func scale(num string, mult uint64) (uint64, error) {
	if num == "" || strings.Count(num, ".") > 1 || num == "." {
		return 0, fmt.Errorf("not a number")
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok || r.Sign() < 0 {
		return 0, fmt.Errorf("not a number")
	}
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).SetUint64(mult)))
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if !q.IsUint64() {
		return 0, fmt.Errorf("too large")
	}
	return q.Uint64(), nil
}
