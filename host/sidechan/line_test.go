package sidechan

import (
	"bufio"
	"fmt"
	"strings"
	"testing"
)

// TestReadLine: the bounded reader returns lines up to the limit, refuses
// longer ones without reading on, and tells a cut line from a clean end.
func TestReadLine(t *testing.T) {
	for _, tc := range []struct {
		in    string
		limit int
		want  []string
		err   error
	}{
		{"a\nbb\n", 3, []string{"a\n", "bb\n"}, nil},
		{"abc\n", 3, nil, errLineTooLong},
		{"abc", 4, nil, errNoNewline},
		{strings.Repeat("y", 10000) + "\n", 10001, []string{strings.Repeat("y", 10000) + "\n"}, nil},
		{strings.Repeat("y", 10001) + "\n", 10001, nil, errLineTooLong},
	} {
		sr := strings.NewReader(tc.in)
		r := bufio.NewReaderSize(sr, 16)
		var got []string
		var err error
		for {
			var l []byte
			l, err = readLine(r, tc.limit)
			if err != nil {
				break
			}
			if len(l) > tc.limit {
				t.Errorf("%.20q: a line of %d bytes over the limit %d", tc.in, len(l), tc.limit)
			}
			got = append(got, string(l))
		}
		if tc.err == nil && err.Error() != "EOF" || tc.err != nil && err != tc.err || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%.20q limit %d: %q, %v", tc.in, tc.limit, got, err)
		}
		if tc.err == errLineTooLong {
			if n := len(tc.in) - sr.Len(); n > tc.limit+16 {
				t.Errorf("%.20q: read %d bytes for a limit of %d", tc.in, n, tc.limit)
			}
		}
	}
}
