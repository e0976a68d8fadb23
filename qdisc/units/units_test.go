package units

import (
	"encoding/json"
	"flag"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	tests := []struct {
		in   string
		want Rate
	}{
		{"0", 0},
		{"12", 12},
		{"12bit", 12},
		{"1kbit", 1e3},
		{"1mbit", 1e6},
		{"100mbit", 100e6},
		{"1gbit", 1e9},
		{"10gbit", 10e9},
		{"400gbit", 400e9},
		{"1tbit", 1e12},
		{"1kibit", 1024},
		{"1mibit", 1 << 20},
		{"1gibit", 1 << 30},
		{"1tibit", 1 << 40},
		// case-insensitive, as tc's strcasecmp.
		{"1Gbit", 1e9},
		{"1GBIT", 1e9},
		{"100Mbit", 100e6},
		// fractions, exponents, sign, whitespace.
		{"1.5mbit", 1.5e6},
		{"1.5Gbit", 1.5e9},
		{".5kbit", 500},
		{"2.kbit", 2000},
		{"0.001kbit", 1},
		{"1e9bit", 1e9},
		{"1E9", 1e9},
		{"2.5e3kbit", 2.5e6},
		{"1e-3kbit", 1},
		{"+10gbit", 10e9},
		{"  1gbit\n", 1e9},
		// truncation toward zero, as tc.
		{"1.9bit", 1},
		{"0.5bit", 0},
		{"0.1kibit", 102},
		// extremes.
		{"18446744073709551615", math.MaxUint64},
		{"18446744073709551615bit", math.MaxUint64},
		{"18446744.073709551615tbit", math.MaxUint64},
	}
	for _, tt := range tests {
		got, err := ParseRate(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseRateErrors(t *testing.T) {
	tests := []struct{ in, reason string }{
		{"", "empty"},
		{"   ", "empty"},
		{"mbit", "not a number"},
		{"abc", "not a number"},
		{".", "not a number"},
		{"-1mbit", "must not be negative"},
		{"-0", "must not be negative"},
		{"1gbps/s", `unknown unit "gbps/s"`},
		{"1 gbit", `unknown unit " gbit"`},
		{"1gb", `unknown unit "gb"`},
		{"1kb", `unknown unit "kb"`},
		{"1mbits", `unknown unit "mbits"`},
		{"1\u212Abit", `unknown unit`}, // Kelvin sign, not k
		{"1e", `unknown unit "e"`},
		{"1e+", `unknown unit "e+"`},
		{"0x10", `unknown unit "x10"`},
		{"1_000", `unknown unit "_000"`},
		{"NaN", "not a number"},
		{"inf", "not a number"},
		{"1,5mbit", `unknown unit ",5mbit"`},
		{"18446744073709551616", "too large (max 18446744073709551615bit)"},
		// tc's byte rates: ambiguous, both readings named.
		{"10gbps", `unit "gbps" is ambiguous: tc reads it as bytes per second (80gbit), people write Gbps for bits; write 10gbit for bits per second, or 80gbit for tc's meaning`},
		{"1bps", `(8bit)`},
		{"125MBps", `unit "MBps" is ambiguous: tc reads it as bytes per second (1gbit)`},
		{" +1.5kibps", `write 1.5kibit for bits per second`},
		{"1tibps", `write 1tibit`},
		{"2305843009213693952bps", "(beyond the largest rate)"},
		{"1e30bit", "too large"},
		{"1e1001", "exponent out of range"},
		{"1e99999999999999999999", "exponent out of range"},
	}
	for _, tt := range tests {
		_, err := ParseRate(tt.in)
		if err == nil {
			t.Errorf("ParseRate(%q): no error", tt.in)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "invalid rate "+quote(tt.in)+": ") ||
			!strings.Contains(msg, tt.reason) ||
			!strings.HasSuffix(msg, "want a number with a unit like 100mbit, 1gbit, 10gbit") {
			t.Errorf("ParseRate(%q) error = %q; want it to mention %q", tt.in, msg, tt.reason)
		}
	}
	_, err := ParseRate("1gbps/s")
	t.Logf("example: %v", err)
}

// quote quotes s as the error messages do (%q).
func quote(s string) string { return strconv.Quote(s) }

func TestRateString(t *testing.T) {
	tests := []struct {
		in   Rate
		want string
	}{
		{0, "0bit"},
		{1, "1bit"},
		{12, "12bit"},
		{999, "999bit"},
		{1000, "1kbit"},
		{1500, "1500bit"},
		{1500000, "1500kbit"},
		{1e6, "1mbit"},
		{100000000, "100mbit"},
		{1000000000, "1gbit"},
		{10 * Gbit, "10gbit"},
		{1500 * Mbit, "1500mbit"},
		{Tbit, "1tbit"},
		{1000 * Tbit, "1000tbit"},
		{1024, "1024bit"},
		{math.MaxUint64, "18446744073709551615bit"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("Rate(%d).String() = %q; want %q", uint64(tt.in), got, tt.want)
		}
		if back, err := ParseRate(tt.want); err != nil || back != tt.in {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", tt.want, back, err, tt.in)
		}
	}
}

func TestBytesPerSecond(t *testing.T) {
	if got := (10 * Gbit).BytesPerSecond(); got != 1.25e9 {
		t.Errorf("10gbit = %v B/s; want 1.25e9", got)
	}
	if got := Rate(12).BytesPerSecond(); got != 1.5 {
		t.Errorf("12bit = %v B/s; want 1.5", got)
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want ByteSize
	}{
		{"0", 0},
		{"1500", 1500},
		{"1500b", 1500},
		{"1B", 1},
		{"1k", 1024},
		{"1kb", 1024},
		{"150kb", 153600},
		{"64K", 64 << 10},
		{"1m", 1 << 20},
		{"1mb", 1 << 20},
		{"1MB", 1 << 20},
		{"1.5mb", 3 << 19},
		{"1g", 1 << 30},
		{"1gb", 1 << 30},
		{"1kbit", 128},
		{"1Kbit", 128},
		{"10kbit", 1280},
		{"1mbit", 128 << 10},
		{"1gbit", 128 << 20},
		{"0.5kb", 512},
		{"1e3", 1000},
		{"1.5b", 1}, // truncated, as tc
		{" 64kb ", 64 << 10},
		{"18446744073709551615", math.MaxUint64},
		{"17592186044415.99999904632568359375mb", math.MaxUint64},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseSizeErrors(t *testing.T) {
	tests := []struct{ in, reason string }{
		{"", "empty"},
		{"kb", "not a number"},
		{"-1kb", "must not be negative"},
		{"1kib", `unknown unit "kib"`},
		{"1bit", `unknown unit "bit"`},
		{"1bytes", `unknown unit "bytes"`},
		{"1tb", `unknown unit "tb"`},
		{"1 kb", `unknown unit " kb"`},
		{"nan", "not a number"},
		{"18446744073709551616", "too large (max 18446744073709551615b)"},
		{"17592186044416mb", "too large"},
	}
	for _, tt := range tests {
		_, err := ParseSize(tt.in)
		if err == nil {
			t.Errorf("ParseSize(%q): no error", tt.in)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "invalid size "+quote(tt.in)+": ") ||
			!strings.Contains(msg, tt.reason) ||
			!strings.Contains(msg, "want a number with a unit like 1500b, 64kb, 1.5mb") {
			t.Errorf("ParseSize(%q) error = %q; want it to mention %q", tt.in, msg, tt.reason)
		}
	}
}

func TestByteSizeString(t *testing.T) {
	tests := []struct {
		in   ByteSize
		want string
	}{
		{0, "0b"},
		{1, "1b"},
		{1500, "1500b"},
		{1024, "1kb"},
		{153600, "150kb"},
		{1048576, "1mb"},
		{3 << 19, "1536kb"},
		{GiB, "1024mb"},
		{1025, "1025b"},
		{math.MaxUint64, "18446744073709551615b"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("ByteSize(%d).String() = %q; want %q", uint64(tt.in), got, tt.want)
		}
		if back, err := ParseSize(tt.want); err != nil || back != tt.in {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.want, back, err, tt.in)
		}
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"100", 100 * time.Microsecond}, // bare number = usecs, as tc
		{"1.5", 1500 * time.Nanosecond},
		{"1s", time.Second},
		{"1sec", time.Second},
		{"2secs", 2 * time.Second},
		{"5ms", 5 * time.Millisecond},
		{"5msec", 5 * time.Millisecond},
		{"5msecs", 5 * time.Millisecond},
		{"1.5ms", 1500 * time.Microsecond},
		{"100us", 100 * time.Microsecond},
		{"100usec", 100 * time.Microsecond},
		{"100usecs", 100 * time.Microsecond},
		{"220µs", 220 * time.Microsecond}, // as time.Duration prints it
		{"220μs", 220 * time.Microsecond},
		{"250ns", 250},
		{"250nsec", 250},
		{"250nsecs", 250},
		{"1MS", time.Millisecond},
		{"1Sec", time.Second},
		{"0.5us", 500},
		{"1.9ns", 1},
		{"1e3us", time.Millisecond},
		{"9223372036854775807ns", math.MaxInt64},
		{"9223372036.854775807s", math.MaxInt64},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseDurationErrors(t *testing.T) {
	tests := []struct{ in, reason string }{
		{"", "empty"},
		{"ms", "not a number"},
		{"-5ms", "must not be negative"},
		{"5m", `unknown unit "m"`},
		{"1h", `unknown unit "h"`},
		{"1s500ms", `unknown unit "s500ms"`},
		{"9223372036854775808ns", "too large (max 9223372036.854775807s)"},
		{"9223372037s", "too large"},
	}
	for _, tt := range tests {
		_, err := ParseDuration(tt.in)
		if err == nil {
			t.Errorf("ParseDuration(%q): no error", tt.in)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "invalid time "+quote(tt.in)+": ") ||
			!strings.Contains(msg, tt.reason) ||
			!strings.Contains(msg, "want a number with a unit like 100us, 5ms, 1s") {
			t.Errorf("ParseDuration(%q) error = %q; want it to mention %q", tt.in, msg, tt.reason)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0us"},
		{1, "1ns"},
		{250, "250ns"},
		{1500, "1.5us"},
		{100 * time.Microsecond, "100us"},
		{999 * time.Microsecond, "999us"},
		{time.Millisecond, "1ms"},
		{5 * time.Millisecond, "5ms"},
		{1500 * time.Microsecond, "1.5ms"},
		{1234567, "1.234567ms"},
		{2 * time.Second, "2s"},
		{2500 * time.Millisecond, "2.5s"},
		{time.Second + 1, "1.000000001s"},
		{time.Hour, "3600s"},
		{math.MaxInt64, "9223372036.854775807s"},
		{-5 * time.Millisecond, "-5ms"},
		{math.MinInt64, "-9223372036.854775808s"},
	}
	for _, tt := range tests {
		if got := FormatDuration(tt.in); got != tt.want {
			t.Errorf("FormatDuration(%d) = %q; want %q", int64(tt.in), got, tt.want)
		}
		if tt.in < 0 {
			continue
		}
		if back, err := ParseDuration(tt.want); err != nil || back != tt.in {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.want, back, err, tt.in)
		}
	}
}

func TestParseProbability(t *testing.T) {
	tests := []struct {
		in   string
		want float64
	}{
		{"0", 0},
		{"1", 1},
		{"0.1", 0.1},
		{".25", 0.25},
		{"1e-3", 0.001},
		{"10%", 0.1},
		{"0%", 0},
		{"100%", 1},
		{"0.5%", 0.005},
		{" 50% ", 0.5},
		{"1.0", 1},
	}
	for _, tt := range tests {
		got, err := ParseProbability(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseProbability(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "%", "-0.1", "-1%", "1.1", "101%", "NaN", "inf", "1e400",
		"0x1p-2", "10 %", "10%%", "0.1abc", "1e99999"} {
		_, err := ParseProbability(in)
		if err == nil {
			t.Errorf("ParseProbability(%q): no error", in)
			continue
		}
		if !strings.HasPrefix(err.Error(), "invalid probability "+quote(in)+": ") ||
			!strings.HasSuffix(err.Error(), "want a probability like 0.1 or 10%, between 0 and 1") {
			t.Errorf("ParseProbability(%q) error = %q", in, err)
		}
	}
}

func TestFlagValue(t *testing.T) {
	var r Rate
	var b ByteSize
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.Var(&r, "rate", "rate")
	fs.Var(&b, "limit", "limit")
	if err := fs.Parse([]string{"-rate", "10gbit", "-limit", "150kb"}); err != nil {
		t.Fatal(err)
	}
	if r != 10*Gbit || b != 150*KiB {
		t.Errorf("got rate %v limit %v", r, b)
	}
	fs.SetOutput(new(strings.Builder))
	if err := fs.Parse([]string{"-rate", "1gbps/s"}); err == nil || !strings.Contains(err.Error(), "invalid rate") {
		t.Errorf("bad -rate: err = %v", err)
	}
	if r != 10*Gbit {
		t.Errorf("failed Set changed value to %v", r)
	}
	if err := fs.Parse([]string{"-limit", "-1"}); err == nil {
		t.Errorf("bad -limit: no error")
	}
}

func TestJSON(t *testing.T) {
	type port struct {
		Rate  Rate     `json:"rate"`
		Limit ByteSize `json:"limit"`
	}
	in := port{Rate: 100 * Mbit, Limit: 153600}
	out, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"rate":"100mbit","limit":"150kb"}`; string(out) != want {
		t.Errorf("Marshal = %s; want %s", out, want)
	}
	var got port
	if err := json.Unmarshal([]byte(`{"rate":"1.5Gbit","limit":"1mb"}`), &got); err != nil {
		t.Fatal(err)
	}
	if got != (port{Rate: 1500 * Mbit, Limit: MiB}) {
		t.Errorf("Unmarshal = %+v", got)
	}
	if err := json.Unmarshal([]byte(`{"rate":"fast"}`), &got); err == nil || !strings.Contains(err.Error(), `invalid rate "fast"`) {
		t.Errorf("Unmarshal bad rate: err = %v", err)
	}
}

// The fuzz targets assert no panic, error prefixes, and that a parsed value
// prints to a string that parses back to the same value.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"0", "12", "100mbit", "1.5Gbit", "1e9", "125kbps", "1tibps",
		"-1", "1gbps/s", "18446744073709551615", ".5kibit", "1e-3kbit", "NaN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "invalid rate ") {
				t.Fatalf("ParseRate(%q) error %q lacks prefix", s, err)
			}
			return
		}
		str := r.String()
		back, err := ParseRate(str)
		if err != nil || back != r {
			t.Fatalf("ParseRate(%q) = %d; String = %q; parses back as %d, %v", s, r, str, back, err)
		}
		var u Rate
		txt, _ := r.MarshalText()
		if err := u.UnmarshalText(txt); err != nil || u != r {
			t.Fatalf("text round trip of %d: %q -> %d, %v", r, txt, u, err)
		}
	})
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "1500", "150kb", "1.5mb", "1g", "10kbit", "1gbit",
		"-1", "1kib", "18446744073709551615", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseSize(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "invalid size ") {
				t.Fatalf("ParseSize(%q) error %q lacks prefix", s, err)
			}
			return
		}
		str := b.String()
		back, err := ParseSize(str)
		if err != nil || back != b {
			t.Fatalf("ParseSize(%q) = %d; String = %q; parses back as %d, %v", s, b, str, back, err)
		}
		var u ByteSize
		txt, _ := b.MarshalText()
		if err := u.UnmarshalText(txt); err != nil || u != b {
			t.Fatalf("text round trip of %d: %q -> %d, %v", b, txt, u, err)
		}
	})
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"0", "100", "100us", "5ms", "1.5ms", "1s", "250ns", "2secs",
		"-5ms", "1h", "9223372036854775807ns", "1e-3ms"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "invalid time ") {
				t.Fatalf("ParseDuration(%q) error %q lacks prefix", s, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseDuration(%q) = %d < 0", s, d)
		}
		str := FormatDuration(d)
		back, err := ParseDuration(str)
		if err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %d; Format = %q; parses back as %d, %v", s, d, str, back, err)
		}
	})
}

func FuzzParseProbability(f *testing.F) {
	for _, s := range []string{"0", "1", "0.1", "10%", "-1", "1e-3", "NaN", "101%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseProbability(s)
		if err == nil && !(p >= 0 && p <= 1) {
			t.Fatalf("ParseProbability(%q) = %v, out of [0,1]", s, p)
		}
	})
}

func TestTimescale(t *testing.T) {
	var one Timescale
	if one.Rate(500*Mbit) != 500*Mbit || one.Time(time.Millisecond) != time.Millisecond || one.K() != 1 {
		t.Errorf("the zero timescale scales")
	}
	k := Timescale(4)
	if got := k.Rate(500 * Mbit); got != 125*Mbit {
		t.Errorf("Rate(500mbit) at 4 = %v, want 125mbit", got)
	}
	if got := k.Time(1500 * time.Microsecond); got != 6*time.Millisecond {
		t.Errorf("Time(1.5ms) at 4 = %v, want 6ms", got)
	}
	if got := k.Fabric(6 * time.Millisecond); got != 1500*time.Microsecond {
		t.Errorf("Fabric(6ms) at 4 = %v, want 1.5ms", got)
	}
	for _, bad := range []Timescale{0.5, -1, 1001} {
		if bad.Validate() == nil {
			t.Errorf("timescale %g: no error", float64(bad))
		}
	}
	if err := Timescale(1000).Validate(); err != nil {
		t.Error(err)
	}
}

// *Timescale is a flag.Value: Set takes a factor, refuses one outside
// 1..MaxTimescale by value and range, and leaves the old value then.
func TestTimescaleSet(t *testing.T) {
	var k Timescale
	if err := k.Set(" 50 "); err != nil || k != 50 || k.String() != "50" {
		t.Errorf("Set(50): %v, %v", k, err)
	}
	for _, tc := range []struct{ in, want string }{
		{"0.5", "timescale 0.5: must be 1..1000"},
		{"fast", `timescale "fast": want a factor 1..1000`},
		{"NaN", "timescale NaN: must be 1..1000"},
	} {
		if err := k.Set(tc.in); err == nil || err.Error() != tc.want || k != 50 {
			t.Errorf("Set(%q) = %v (k %v), want %q and k kept", tc.in, err, k, tc.want)
		}
	}
	var _ flag.Value = &k
}

// TestFormatBound: a quantile of a log2 histogram prints as the bound it
// is, without the bucket edge's false digits.
func TestFormatBound(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1 << 24: "<16.8ms", 1 << 31: "<2.15s", 512: "<512ns", 1 << 10: "<1.03us", 1 << 20: "<1.05ms", 0: "<0ns",
		1 << 13: "<8.2us", 1 << 16: "<65.6us", 999_999: "<1ms", 1_000_000: "<1ms", 1_234_567_890_123: "<1240s",
	} {
		if got := FormatBound(d); got != want {
			t.Errorf("FormatBound(%d) = %q, want %q", d, got, want)
		}
	}
}

func TestFormatMeasured(t *testing.T) {
	for d, want := range map[time.Duration]string{
		8_472_801: "8.47ms", 251_624: "252us", 35_555: "35.6us", 115_111: "115us", 20_000: "20us", 512: "512ns",
		999_600: "1ms", 1_234_567_890_123: "1230s", 0: "0ns",
	} {
		if got := FormatMeasured(d); got != want {
			t.Errorf("FormatMeasured(%d) = %q, want %q", d, got, want)
		}
	}
}
