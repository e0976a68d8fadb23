// Package units provides typed rates, sizes, times and probabilities that
// parse and print with tc(8)/iproute2 spelling.
//
// Parsing follows tc: units are case-insensitive, decimal fractions and
// exponents are allowed ("1.5mbit", "1e9bit"), and a result that is not a
// whole number of base units (bits, bytes, nanoseconds) is truncated, as tc
// does. Unlike tc, parsing is exact (no float rounding), surrounding
// whitespace is ignored, and negatives, NaN, Inf, hex and overflow are
// rejected. String forms are exact and parse back to the same value.
package units

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/enum"
)

// Rate is a link or shaping rate in bits per second.
type Rate uint64

// Common rates (SI, as tc's kbit/mbit/gbit/tbit).
const (
	Bit  Rate = 1
	Kbit Rate = 1000 * Bit
	Mbit Rate = 1000 * Kbit
	Gbit Rate = 1000 * Mbit
	Tbit Rate = 1000 * Gbit
)

// ByteSize is a size in bytes (buffer limits, thresholds).
type ByteSize uint64

// Common sizes (1024-based, as tc's kb/mb/gb).
const (
	Byte ByteSize = 1
	KiB  ByteSize = 1024 * Byte
	MiB  ByteSize = 1024 * KiB
	GiB  ByteSize = 1024 * MiB
)

const (
	rateHint  = "want a number with a unit like 100mbit, 1gbit, 10gbit"
	rateUnits = "bit, kbit, mbit, gbit, tbit, kibit..tibit; a bare number is bit"
	sizeHint  = "want a number with a unit like 1500b, 64kb, 1.5mb"
	sizeUnits = "b, kb or k, mb or m, gb or g (1024-based), kbit, mbit, gbit; a bare number is bytes"
	timeHint  = "want a number with a unit like 100us, 5ms, 1s"
	timeUnits = "s/sec/secs, ms/msec/msecs, us/usec/usecs/µs, ns/nsec/nsecs; a bare number is microseconds"
	probHint  = "want a probability like 0.1 or 10%, between 0 and 1"
)

// rateScale maps lower-case tc rate units to bits per second.
var rateScale = map[string]uint64{
	"bit":   1,
	"kbit":  1e3,
	"mbit":  1e6,
	"gbit":  1e9,
	"tbit":  1e12,
	"kibit": 1 << 10,
	"mibit": 1 << 20,
	"gibit": 1 << 30,
	"tibit": 1 << 40,
}

// ambiguousRateScale holds the units refused as ambiguous, with tc's meaning:
// tc reads bps, kbps, … as bytes per second, while people in this field
// write 10Gbps for 10 gigabits. A silent choice either way would be off by
// 8 for someone, so both are spelled out instead (one rule: every rate of
// the lab, flags and files, goes through ParseRate).
var ambiguousRateScale = map[string]uint64{
	"bps":   8,
	"kbps":  8e3,
	"mbps":  8e6,
	"gbps":  8e9,
	"tbps":  8e12,
	"kibps": 8 << 10,
	"mibps": 8 << 20,
	"gibps": 8 << 30,
	"tibps": 8 << 40,
}

// sizeScale maps lower-case tc size units to bytes.
var sizeScale = map[string]uint64{
	"b":    1,
	"k":    1 << 10,
	"kb":   1 << 10,
	"m":    1 << 20,
	"mb":   1 << 20,
	"g":    1 << 30,
	"gb":   1 << 30,
	"kbit": 1 << 10 / 8,
	"mbit": 1 << 20 / 8,
	"gbit": 1 << 30 / 8,
}

// timeScale maps lower-case tc time units to nanoseconds.
var timeScale = map[string]uint64{
	"s":     1e9,
	"sec":   1e9,
	"secs":  1e9,
	"ms":    1e6,
	"msec":  1e6,
	"msecs": 1e6,
	"us":    1e3,
	"usec":  1e3,
	"usecs": 1e3,
	"µs":    1e3, // Go's time.Duration spelling (micro sign), which hints print
	"μs":    1e3, // Greek mu
	"ns":    1,
	"nsec":  1,
	"nsecs": 1,
}

// AmbiguousRateError is ParseRate's refusal of a byte-rate unit (bps, kbps,
// …): tc's bytes per second, or the field's bits per second.
type AmbiguousRateError struct {
	Input string // as given
	Unit  string // as given, "Gbps"
	Bits  string // the bits reading, "10gbit"
	TC    string // tc's reading, "80gbit"
}

func (e *AmbiguousRateError) Error() string {
	return fmt.Sprintf("invalid rate %q: unit %q is ambiguous: tc reads it as bytes per second (%s), "+
		"people write Gbps for bits; write %s for bits per second, or %s for tc's meaning; %s",
		e.Input, e.Unit, e.TC, e.Bits, e.TC, rateHint)
}

// ParseRate parses a tc rate such as "100mbit", "10gbit" or "1.5mbit". A
// bare number is bits per second. tc's byte rates (bps, kbps, …: "125kbps"
// is 1 Mbit/s to tc) are refused as ambiguous, with both readings named.
func ParseRate(s string) (Rate, error) {
	trimmed := strings.TrimSpace(s)
	if num, rest, err := scanNumber(trimmed); err == nil && !num.neg {
		unit := asciiLower(rest)
		if scale, ok := ambiguousRateScale[unit]; ok {
			numText := strings.TrimPrefix(trimmed[:len(trimmed)-len(rest)], "+")
			bits := unit[:len(unit)-len("ps")] + "it" // gbps -> gbit
			tcMeaning := "beyond the largest rate"
			if v, err := parseQuantity("rate", numText, nil, scale, math.MaxUint64, "", "", ""); err == nil {
				tcMeaning = Rate(v).String()
			}
			return 0, &AmbiguousRateError{Input: s, Unit: rest, Bits: numText + bits, TC: tcMeaning}
		}
	}
	v, err := parseQuantity("rate", s, rateScale, 1, math.MaxUint64, Rate(math.MaxUint64).String(), rateHint, rateUnits)
	return Rate(v), err
}

// String formats r in tc style with the largest SI unit that is exact:
// "1gbit", "100mbit", "1500kbit", "12bit".
func (r Rate) String() string {
	for _, u := range [...]struct {
		n    uint64
		name string
	}{{1e12, "tbit"}, {1e9, "gbit"}, {1e6, "mbit"}, {1e3, "kbit"}} {
		if r != 0 && uint64(r)%u.n == 0 {
			return strconv.FormatUint(uint64(r)/u.n, 10) + u.name
		}
	}
	return strconv.FormatUint(uint64(r), 10) + "bit"
}

// BytesPerSecond returns r in bytes per second.
func (r Rate) BytesPerSecond() float64 { return float64(r) / 8 }

// Set implements flag.Value.
func (r *Rate) Set(s string) error { return enum.Set(r, s, ParseRate) }

// MarshalText implements encoding.TextMarshaler.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *Rate) UnmarshalText(b []byte) error { return r.Set(string(b)) }

// ParseSize parses a tc size such as "1500b", "64kb", "1.5mb" or "10kbit".
// A bare number is bytes; k/kb, m/mb, g/gb are 1024-based and kbit, mbit,
// gbit are 1024-based bits (kbit = 128 bytes), as in tc.
func ParseSize(s string) (ByteSize, error) {
	v, err := parseQuantity("size", s, sizeScale, 1, math.MaxUint64, ByteSize(math.MaxUint64).String(), sizeHint, sizeUnits)
	return ByteSize(v), err
}

// String formats b as tc does, with the largest of mb, kb (1024-based) or b
// that is exact: "1mb", "150kb", "1500b".
func (b ByteSize) String() string {
	switch {
	case b != 0 && b%MiB == 0:
		return strconv.FormatUint(uint64(b/MiB), 10) + "mb"
	case b != 0 && b%KiB == 0:
		return strconv.FormatUint(uint64(b/KiB), 10) + "kb"
	}
	return strconv.FormatUint(uint64(b), 10) + "b"
}

// Set implements flag.Value.
func (b *ByteSize) Set(s string) error { return enum.Set(b, s, ParseSize) }

// MarshalText implements encoding.TextMarshaler.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (b *ByteSize) UnmarshalText(p []byte) error { return b.Set(string(p)) }

// ParseDuration parses a tc time such as "100us", "5ms", "1.5ms", "1s" or
// "250ns". As in tc(8), a bare number is microseconds ("100" = 100us).
// (tc's 64-bit time options, e.g. for fq, treat a bare number as
// nanoseconds; this package always uses microseconds.)
func ParseDuration(s string) (time.Duration, error) {
	v, err := parseQuantity("time", s, timeScale, 1e3, math.MaxInt64, FormatDuration(math.MaxInt64), timeHint, timeUnits)
	return time.Duration(v), err
}

// FormatBound prints d as an upper bound to 3 significant digits, rounded
// up, "<16.8ms":
// for a quantile of a log2 histogram, whose bucket edge (16.777216ms) has
// no more precision than its bucket.
func FormatBound(d time.Duration) string {
	// Round up: a bound must not shrink (<8.2us for an edge of 8.192us).
	return "<" + formatDigits3(d, math.Ceil)
}

// FormatMeasured prints a measured time (a mean, a maximum) to 3
// significant digits, rounded to nearest, in FormatBound's units:
// "8.47ms", "252us", "35.6us"; more digits would be false precision.
func FormatMeasured(d time.Duration) string {
	return formatDigits3(d, math.Round)
}

// formatDigits3 prints d to 3 significant digits, rounded by round, then
// in the unit that fits: 999.9us is 1ms, not 1e+03us.
func formatDigits3(d time.Duration, round func(float64) float64) string {
	v := float64(d)
	if v > 0 {
		step := math.Pow(10, math.Floor(math.Log10(v))-2) // the third digit's
		v = round(v/step) * step
		v, _ = strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64) // step's float error
	}
	unit := "ns"
	for _, u := range [...]struct {
		n    float64
		name string
	}{{1e9, "s"}, {1e6, "ms"}, {1e3, "us"}} {
		if v >= u.n {
			v, unit = v/u.n, u.name
			break
		}
	}
	return strconv.FormatFloat(v, 'f', -1, 64) + unit
}

// FormatDuration formats d in tc style with the largest unit of s, ms, us,
// ns not exceeding d, exactly: "2s", "5ms", "1.5ms", "100us", "250ns".
// Zero is "0us".
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return "0us"
	}
	sign := ""
	n := uint64(d)
	if d < 0 {
		sign, n = "-", uint64(-(d+1))+1
	}
	for _, u := range [...]struct {
		n      uint64
		digits int
		name   string
	}{{1e9, 9, "s"}, {1e6, 6, "ms"}, {1e3, 3, "us"}} {
		if n < u.n {
			continue
		}
		s := sign + strconv.FormatUint(n/u.n, 10)
		if f := n % u.n; f != 0 {
			frac := strconv.FormatUint(f, 10)
			frac = strings.Repeat("0", u.digits-len(frac)) + frac
			s += "." + strings.TrimRight(frac, "0")
		}
		return s + u.name
	}
	return sign + strconv.FormatUint(n, 10) + "ns"
}

// ParseProbability parses a probability as a fraction ("0.1") or a
// percentage ("10%"). The result is in [0, 1].
func ParseProbability(s string) (float64, error) {
	in := s
	s = strings.TrimSpace(s)
	fail := func(reason string) (float64, error) {
		return 0, fmt.Errorf("invalid probability %q: %s; %s", in, reason, probHint)
	}
	if s == "" {
		return fail("empty")
	}
	pct := strings.HasSuffix(s, "%")
	if pct {
		s = s[:len(s)-1]
	}
	num, rest, err := scanNumber(s)
	if err != nil {
		return fail(err.Error())
	}
	if rest != "" {
		return fail(fmt.Sprintf("unexpected %q", rest))
	}
	if num.neg {
		return fail("must not be negative")
	}
	p, perr := strconv.ParseFloat(s, 64)
	if perr != nil && !errors.Is(perr, strconv.ErrRange) {
		return fail("not a number")
	}
	if pct {
		p /= 100
	}
	if p > 1 || math.IsNaN(p) || math.IsInf(p, 0) {
		return fail("out of range")
	}
	return p, nil
}

// number is a scanned non-negative decimal: digits × 10^exp.
type number struct {
	neg    bool
	digits string // decimal digits, possibly with leading zeros
	exp    int
}

const maxExp = 1000

var errNotNumber = errors.New("not a number")

// scanNumber scans a leading decimal number with optional sign, fraction
// and exponent (like strtod, without hex, inf or nan) and returns the rest.
func scanNumber(s string) (number, string, error) {
	var n number
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		n.neg = s[i] == '-'
		i++
	}
	start := i
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intPart := s[start:i]
	frac := ""
	if i < len(s) && s[i] == '.' {
		i++
		fs := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		frac = s[fs:i]
	}
	if intPart == "" && frac == "" {
		return n, s, errNotNumber
	}
	n.digits = intPart + frac
	n.exp = -len(frac)
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		es := j
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j > es { // an exponent; otherwise "e" is left as the unit
			e, err := strconv.Atoi(s[i+1 : j])
			if err != nil || e > maxExp || e < -maxExp {
				return n, s, errors.New("exponent out of range")
			}
			n.exp += e
			i = j
		}
	}
	if n.exp > maxExp+len(n.digits) || n.exp < -maxExp-len(n.digits) {
		return n, s, errors.New("exponent out of range")
	}
	return n, s[i:], nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// asciiLower lower-cases ASCII letters only, so that non-ASCII look-alikes
// (e.g. the Kelvin sign) are not accepted as units.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// parseQuantity parses number+unit into base units, truncating toward zero.
func parseQuantity(kind, s string, scales map[string]uint64, bare, max uint64, maxStr, hint, unitList string) (uint64, error) {
	in := s
	s = strings.TrimSpace(s)
	fail := func(reason string) (uint64, error) {
		return 0, fmt.Errorf("invalid %s %q: %s; %s", kind, in, reason, hint)
	}
	if s == "" {
		return fail("empty")
	}
	num, rest, err := scanNumber(s)
	if err != nil {
		return fail(err.Error())
	}
	scale := bare
	if rest != "" {
		var ok bool
		if scale, ok = scales[asciiLower(rest)]; !ok {
			return fail(fmt.Sprintf("unknown unit %q (units: %s)", rest, unitList))
		}
	}
	if num.neg {
		return fail("must not be negative")
	}
	v, ok := new(big.Int).SetString(num.digits, 10)
	if !ok {
		return fail(errNotNumber.Error())
	}
	v.Mul(v, new(big.Int).SetUint64(scale))
	ten := big.NewInt(10)
	if num.exp >= 0 {
		v.Mul(v, new(big.Int).Exp(ten, big.NewInt(int64(num.exp)), nil))
	} else {
		v.Quo(v, new(big.Int).Exp(ten, big.NewInt(int64(-num.exp)), nil))
	}
	if !v.IsUint64() || v.Uint64() > max {
		return fail("too large (max " + maxStr + ")")
	}
	return v.Uint64(), nil
}
