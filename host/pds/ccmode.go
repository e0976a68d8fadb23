package pds

import "github.com/fabriclab/fabriclab/qdisc/enum"

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

var ccModeNames = enum.Names{CCNSCC: {"nscc"}, CCRCCC: {"rccc"}, CCBoth: {"both"}, CCNone: {"none"}}

func (m CCMode) String() string { return enum.String(m, ccModeNames, "CCMode") }

// CCModeNames lists the modes by name, as ParseCCMode takes them.
func CCModeNames() []string { return ccModeNames.Canonical() }

// ParseCCMode reads a mode's name (nscc, rccc, both, none).
func ParseCCMode(s string) (CCMode, error) { return enum.Parse[CCMode](s, ccModeNames, "pds: cc") }

// MarshalText writes the mode's name (JSON).
func (m CCMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads a mode's name.
func (m *CCMode) UnmarshalText(b []byte) error { return enum.Unmarshal(m, b, ccModeNames, "pds: cc") }

// window reports whether the mode runs NSCC's window.
func (m CCMode) window() bool { return m == CCNSCC || m == CCBoth }

// credit reports whether the mode runs RCCC's credit.
func (m CCMode) credit() bool { return m == CCRCCC || m == CCBoth }
