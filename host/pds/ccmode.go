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

func (m CCMode) String() string {
	if m < numCCModes {
		return ccModeNames[m]
	}
	return fmt.Sprintf("CCMode(%d)", uint8(m))
}

// CCModeNames lists the modes by name, as ParseCCMode takes them.
func CCModeNames() []string { return ccModeNames[:] }

// ParseCCMode reads a mode's name (nscc, rccc, both, none).
func ParseCCMode(s string) (CCMode, error) {
	for i, n := range ccModeNames {
		if strings.EqualFold(n, s) {
			return CCMode(i), nil
		}
	}
	return 0, fmt.Errorf("pds: cc %q: want one of %s", s, strings.Join(ccModeNames[:], ", "))
}

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
