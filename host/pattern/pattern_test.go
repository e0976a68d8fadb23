package pattern

import "testing"

// Fill then Match agree at any offset and length (aligned or not); one
// flipped byte, another message or another seed fail the match.
func TestFillMatch(t *testing.T) {
	whole := make([]byte, 300)
	Fill(whole, 7, 3, 0)
	for _, c := range []struct{ off, n int }{{0, 300}, {1, 17}, {8, 64}, {13, 200}, {299, 1}, {5, 0}} {
		part := make([]byte, c.n)
		Fill(part, 7, 3, c.off)
		if string(part) != string(whole[c.off:c.off+c.n]) {
			t.Errorf("Fill at %d+%d differs from the whole message's bytes", c.off, c.n)
		}
		if !Match(whole[c.off:c.off+c.n], 7, 3, c.off) {
			t.Errorf("Match at %d+%d failed", c.off, c.n)
		}
	}
	bad := append([]byte(nil), whole...)
	bad[123] ^= 1
	if Match(bad, 7, 3, 0) || Match(whole, 7, 4, 0) || Match(whole, 8, 3, 0) {
		t.Error("Match accepted a changed byte, message or seed")
	}
}
