//go:build linux

package kernel

import "testing"

func TestParseVersion(t *testing.T) {
	for s, want := range map[string]Version{
		"6.18.44-fc-v595": {6, 18}, "6.6.0": {6, 6}, "6.5.13-generic": {6, 5},
		"5.15.0-91-generic": {5, 15}, "7.0": {7, 0}, "6.10-rc1": {6, 10}, "6.1-rc3": {6, 1}, "5.10": {5, 10},
	} {
		got, err := ParseVersion(s)
		if err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "6", "weird", "x.6", "6.x"} {
		if v, err := ParseVersion(s); err == nil {
			t.Errorf("ParseVersion(%q) = %v, want an error", s, v)
		}
	}
}

func TestVersionAtLeast(t *testing.T) {
	want := Version{6, 6}
	for v, ok := range map[Version]bool{{6, 18}: true, {6, 6}: true, {6, 5}: false, {5, 15}: false, {7, 0}: true} {
		if got := v.AtLeast(want); got != ok {
			t.Errorf("%v.AtLeast(%v) = %v", v, want, got)
		}
	}
}

func TestRunningKernel(t *testing.T) {
	rel, err := Release()
	if err != nil || rel == "" {
		t.Fatalf("Release() = %q, %v", rel, err)
	}
	if _, err := ParseVersion(rel); err != nil {
		t.Errorf("the running kernel's release does not parse: %v", err)
	}
	if ok, got, err := AtLeast("0.0"); !ok || got != rel || err != nil {
		t.Errorf("AtLeast(0.0) = %v, %q, %v", ok, got, err)
	}
	if ok, _, err := AtLeast("999.0"); ok || err != nil {
		t.Errorf("AtLeast(999.0) = %v, %v", ok, err)
	}
	if _, _, err := AtLeast("new"); err == nil {
		t.Error("AtLeast(new): no error")
	}
}
