package enum

import "testing"

type color uint8

var colorNames = Names{{"red"}, {}, {"blue", "azure"}}

func TestEnum(t *testing.T) {
	for v, want := range map[color]string{0: "red", 1: "color(1)", 2: "blue", 9: "color(9)"} {
		if got := String(v, colorNames, "color"); got != want {
			t.Errorf("String(%d) = %q, want %q", v, got, want)
		}
	}
	for s, want := range map[string]color{"red": 0, "BLUE": 2, "Azure": 2} {
		if got, err := Parse[color](s, colorNames, "color"); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	_, err := Parse[color]("green", colorNames, "color")
	if err == nil || err.Error() != `color "green": want red or blue` {
		t.Errorf("Parse(green): %v", err)
	}
	var c color
	if err := Unmarshal(&c, []byte("azure"), colorNames, "color"); err != nil || c != 2 {
		t.Errorf("Unmarshal(azure) = %d, %v", c, err)
	}
	if got := String(-1, Names{{"zero"}}, "kind"); got != "kind(-1)" {
		t.Errorf("String(-1) = %q, want kind(-1)", got)
	}
	for v, want := range map[color]string{2: "blue", 1: "0x01", 0x1f: "0x1f"} {
		if got := Format(v, colorNames, "0x%02x"); got != want {
			t.Errorf("Format(%d) = %q, want %q", v, got, want)
		}
	}
	if _, ok := Lookup(color(1), colorNames); ok {
		t.Errorf("Lookup(1) found a name for a gap")
	}
	if got := (Names{{"only"}}).List(); got != "only" {
		t.Errorf("List of one = %q", got)
	}
}
