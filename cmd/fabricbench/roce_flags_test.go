package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestParseSections checks that -only takes every listed section, that
// roce picks both its parts, and that an unknown name is refused by name.
func TestParseSections(t *testing.T) {
	for _, name := range sectionNames {
		if _, err := parseSections(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	s, err := parseSections("roce, tcp,soak")
	if err != nil {
		t.Fatal(err)
	}
	if want := (sections{goodput: true, reaction: true, throughput: true, soak: true}); s != want {
		t.Errorf("roce,tcp,soak: %+v, want %+v", s, want)
	}
	if _, err := parseSections("np,bogus"); err == nil || !strings.Contains(err.Error(), `unknown section "bogus"`) {
		t.Errorf("bogus: %v", err)
	}
}

// TestPositionalArgs checks that a stray word is refused by name instead of
// starting the bench, and that a lone "version" is taken as -version.
func TestPositionalArgs(t *testing.T) {
	if v, err := positionalArgs(nil); v || err != nil {
		t.Errorf("none: %v, %v", v, err)
	}
	if v, err := positionalArgs([]string{"version"}); !v || err != nil {
		t.Errorf("version: %v, %v", v, err)
	}
	for _, args := range [][]string{{"bogus"}, {"bogus", "version"}, {"version", "bogus"}} {
		_, err := positionalArgs(args)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("unexpected argument %q", args[0])) || !strings.Contains(err.Error(), "-help") {
			t.Errorf("%q: %v", args, err)
		}
	}
}
