package pds

import (
	"fmt"
	"strings"
)

// CCMode is the congestion control a sender's CCCs run (uet.md "CC
// modes"): NSCC's window, RCCC's receiver credit, both (a packet leaves
// only when both allow it), or none (only the PDC window and the line).
// A receiver needs no mode: it serves credit to every source whose
// requests carry a credit target (RUD_CC_REQ).
type CCMode uint8

// The modes. The zero value is NSCC, the default.
const (
	CCNSCC CCMode = iota
	CCRCCC
	CCBoth
	CCNone
	numCCModes
)

var ccModeNames = [numCCModes]string{"nscc", "rccc", "both", "none"}

func (m CCMode) String() string { return enumString(m, ccModeNames[:], "CCMode") }

// CCModeNames lists the modes by name, as ParseCCMode takes them.
func CCModeNames() []string { return ccModeNames[:] }

// ParseCCMode reads a mode's name (nscc, rccc, both, none).
func ParseCCMode(s string) (CCMode, error) { return parseEnum[CCMode](s, ccModeNames[:], "cc") }

// MarshalText writes the mode's name (JSON).
func (m CCMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads a mode's name.
func (m *CCMode) UnmarshalText(b []byte) error {
	v, err := ParseCCMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// window reports whether the mode runs NSCC's window.
func (m CCMode) window() bool { return m == CCNSCC || m == CCBoth }

// credit reports whether the mode runs RCCC's credit.
func (m CCMode) credit() bool { return m == CCRCCC || m == CCBoth }

// enumString names v by names, or Type(v) past them.
func enumString[T ~uint8](v T, names []string, typ string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, uint8(v))
}

// parseEnum reads a name of names, any case; the error names the field.
func parseEnum[T ~uint8](s string, names []string, field string) (T, error) {
	for i, n := range names {
		if strings.EqualFold(n, s) {
			return T(i), nil
		}
	}
	return 0, fmt.Errorf("pds: %s %q: want one of %s", field, s, strings.Join(names, ", "))
}
