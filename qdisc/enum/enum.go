// Package enum spells the values of the project's small integer enums
// from one table each: String, the parser and MarshalText read the same
// names, so a value is written as it is read.
package enum

import (
	"fmt"
	"strings"
)

// Integer is an enum's underlying type.
type Integer interface {
	~uint8 | ~uint16 | ~uint32 | ~uint64 | ~int
}

// Names lists an enum's spellings by value: Names[v][0] is v's canonical
// name, the rest other spellings Parse takes. An empty entry is a value
// the enum does not define.
type Names [][]string

// String is v's canonical name, or typ(v) for a value without one.
func String[T Integer](v T, names Names, typ string) string {
	if n, ok := Lookup(v, names); ok {
		return n
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

// Format is v's canonical name, or for a value without one v formatted by
// unknown, a format of one unsigned integer verb ("0x%02x"): the String of
// a wire field, whose undefined values are spelled as its dissector does.
func Format[T Integer](v T, names Names, unknown string) string {
	if n, ok := Lookup(v, names); ok {
		return n
	}
	return fmt.Sprintf(unknown, uint64(v))
}

// Lookup is v's canonical name, and whether v has one.
func Lookup[T Integer](v T, names Names) (string, bool) {
	if uint64(v) < uint64(len(names)) && len(names[v]) > 0 {
		return names[v][0], true
	}
	return "", false
}

// Parse reads any spelling of a value, in any case. The error is "what
// "s": want a, b or c".
func Parse[T Integer](s string, names Names, what string) (T, error) {
	for v, ns := range names {
		for _, n := range ns {
			if strings.EqualFold(n, s) {
				return T(v), nil
			}
		}
	}
	return 0, fmt.Errorf("%s %q: want %s", what, s, names.List())
}

// List is the canonical names: "a, b or c".
func (n Names) List() string {
	cs := n.Canonical()
	if len(cs) < 2 {
		return strings.Join(cs, "")
	}
	return strings.Join(cs[:len(cs)-1], ", ") + " or " + cs[len(cs)-1]
}

// Canonical is the canonical names in value order.
func (n Names) Canonical() []string {
	var cs []string
	for _, ns := range n {
		if len(ns) > 0 {
			cs = append(cs, ns[0])
		}
	}
	return cs
}

// Unmarshal is UnmarshalText by Parse.
func Unmarshal[T Integer](dst *T, b []byte, names Names, what string) error {
	return Set(dst, string(b), func(s string) (T, error) { return Parse[T](s, names, what) })
}

// Set stores parse(s) in dst, and leaves dst as it was on an error: an
// UnmarshalText by a type's own parser.
func Set[T any](dst *T, s string, parse func(string) (T, error)) error {
	v, err := parse(s)
	if err != nil {
		return err
	}
	*dst = v
	return nil
}
