package version

import (
	"strings"
	"testing"
)

func TestLine(t *testing.T) {
	l := Line("portctl")
	if !strings.HasPrefix(l, "portctl "+Version+" (fabriclab") || !strings.Contains(l, "go1.") {
		t.Errorf("Line = %q", l)
	}
}
