package main

import (
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
