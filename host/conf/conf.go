// Package conf decodes the project's YAML files (the daemon's config, lab
// files) strictly, and words every error the same way: the file and line,
// the field's path ("flows[1].rate"), the value and what is allowed.
//
// Decode walks the YAML tree itself instead of yaml.Unmarshal so that a
// wrong type or a bad unit names its field: yaml.v3 says only "cannot
// unmarshal !!str into int" with a line. Values are decoded by Go type:
// structs by their `yaml` tag (unknown keys are errors), slices,
// map[string]T, pointers, strings, bools, integers (range-checked by
// width), floats, time.Duration ("100us", "1.5s": tc's and Go's units, see
// units.ParseDuration) and anything with UnmarshalText (units.Rate,
// units.ByteSize, netip.Addr, netip.Prefix, ...).
package conf

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Error is one bad field.
type Error struct {
	File    string // optional
	Line    int    // 0: unknown
	Path    string // "flows[1].rate"; "" for the document
	Value   string // as written
	Allowed string // what would have been accepted
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(":")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:", e.Line)
	}
	if b.Len() > 0 {
		b.WriteString(" ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	if e.Value != "" {
		fmt.Fprintf(&b, "%q: ", e.Value)
	}
	b.WriteString(e.Allowed)
	return b.String()
}

// Errorf returns an Error for path and value; allowed says what is
// accepted ("1..65535", "rocev2 or uet").
func Errorf(path string, value any, allowed string, args ...any) *Error {
	return &Error{Path: path, Value: fmt.Sprint(value), Allowed: fmt.Sprintf(allowed, args...)}
}

// Join joins path elements: Join("flows[1]", "rate") is "flows[1].rate".
func Join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// Index is path[i].
func Index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// Key is path.key for a map key.
func Key(path, key string) string { return Join(path, key) }

// Decode decodes the YAML document data into v (a pointer) strictly. file
// names the document in errors (optional). Lines are filled in on errors
// that Validate methods return later by Locate.
func Decode(file string, data []byte, v any) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", nameOr(file), err)
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return errors.New("conf.Decode: v must be a non-nil pointer")
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return &Error{File: file, Allowed: "the file is empty"}
	}
	d := decoder{file: file}
	return d.decode(doc.Content[0], rv.Elem(), "")
}

func nameOr(file string) string {
	if file == "" {
		return "yaml"
	}
	return file
}

// Locate fills in File and Line of a *Error (wrapped or not) returned by a
// Validate method, from the document data, and returns err.
func Locate(file string, data []byte, err error) error {
	var ce *Error
	if !errors.As(err, &ce) {
		return err
	}
	ce.File = file
	if ce.Line > 0 {
		return err
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return err
	}
	if n := find(doc.Content[0], ce.Path); n != nil {
		ce.Line = n.Line
	}
	return err
}

// find returns the node at path, or the deepest one found on the way.
func find(n *yaml.Node, path string) *yaml.Node {
	if path == "" {
		return n
	}
	for _, el := range splitPath(path) {
		next := (*yaml.Node)(nil)
		switch {
		case el.index >= 0 && n.Kind == yaml.SequenceNode && el.index < len(n.Content):
			next = n.Content[el.index]
		case el.index < 0 && n.Kind == yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == el.key {
					next = n.Content[i+1]
					break
				}
			}
		}
		if next == nil {
			return n
		}
		n = next
	}
	return n
}

type pathElem struct {
	key   string
	index int // -1: a key
}

func splitPath(path string) []pathElem {
	var out []pathElem
	for _, part := range strings.Split(path, ".") {
		key := part
		var idx []int
		for {
			o := strings.LastIndexByte(key, '[')
			if o < 0 || !strings.HasSuffix(key, "]") {
				break
			}
			i, err := strconv.Atoi(key[o+1 : len(key)-1])
			if err != nil {
				break
			}
			idx = append([]int{i}, idx...)
			key = key[:o]
		}
		if key != "" {
			out = append(out, pathElem{key: key, index: -1})
		}
		for _, i := range idx {
			out = append(out, pathElem{index: i})
		}
	}
	return out
}

type decoder struct{ file string }

func (d *decoder) errf(n *yaml.Node, path, value, allowed string, args ...any) *Error {
	return &Error{File: d.file, Line: n.Line, Path: path, Value: value, Allowed: fmt.Sprintf(allowed, args...)}
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	unmarshalType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // keep the zero value (or the default already there)
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return d.decode(n, v.Elem(), path)
	}
	if v.Type() == durationType {
		if n.Kind != yaml.ScalarNode {
			return d.errf(n, path, "", "want a duration like 100us, 5ms, 1.5s")
		}
		dur, err := units.ParseDuration(n.Value)
		if err != nil {
			return d.errf(n, path, n.Value, "want a duration like 100us, 5ms, 1.5s")
		}
		v.SetInt(int64(dur))
		return nil
	}
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalType) {
		if n.Kind != yaml.ScalarNode {
			return d.errf(n, path, "", "want a single value, not a %s", kindName(n))
		}
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.Value)); err != nil {
			return d.errf(n, path, n.Value, "%s", trimPrefix(err.Error(), n.Value))
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Struct:
		return d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return d.errf(n, path, scalarValue(n), "want a list")
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			if err := d.decode(c, s.Index(i), Index(path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return fmt.Errorf("conf: %s: map keys must be strings", path)
		}
		if n.Kind != yaml.MappingNode {
			return d.errf(n, path, scalarValue(n), "want a mapping of names to values")
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if v.MapIndex(reflect.ValueOf(k).Convert(v.Type().Key())).IsValid() {
				return d.errf(n.Content[i], Key(path, k), "", "given twice")
			}
			e := reflect.New(v.Type().Elem()).Elem()
			if err := d.decode(n.Content[i+1], e, Key(path, k)); err != nil {
				return err
			}
			v.SetMapIndex(reflect.ValueOf(k).Convert(v.Type().Key()), e)
		}
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return d.errf(n, path, "", "want a single value, not a %s", kindName(n))
	}
	s := n.Value
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return d.errf(n, path, s, "want true or false")
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := v.Type().Bits()
		i, err := strconv.ParseInt(s, 0, bits)
		if err != nil {
			lo, hi := -(int64(1) << (bits - 1)), int64(1)<<(bits-1)-1
			return d.errf(n, path, s, "want an integer in %d..%d", lo, hi)
		}
		v.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		bits := v.Type().Bits()
		u, err := strconv.ParseUint(s, 0, bits)
		if err != nil {
			return d.errf(n, path, s, "want an integer in 0..%d", uint64(math.MaxUint64)>>(64-bits))
		}
		v.SetUint(u)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(s, v.Type().Bits())
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return d.errf(n, path, s, "want a number")
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("conf: %s: cannot decode into %s", path, v.Type())
	}
	return nil
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.MappingNode {
		return d.errf(n, path, scalarValue(n), "want a mapping of fields")
	}
	fields := structFields(v.Type())
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i].Value
		idx, ok := fields[k]
		if !ok {
			return d.errf(n.Content[i], Join(path, k), "", "unknown field; %s has %s", orDoc(path), fieldList(v.Type()))
		}
		if seen[k] {
			return d.errf(n.Content[i], Join(path, k), "", "given twice")
		}
		seen[k] = true
		if err := d.decode(n.Content[i+1], v.FieldByIndex(idx), Join(path, k)); err != nil {
			return err
		}
	}
	return nil
}

func orDoc(path string) string {
	if path == "" {
		return "the document"
	}
	return path
}

// structFields maps YAML names to field indexes: the `yaml` tag's name, or
// the field name in lower case; "-" skips a field; ",inline" embeds.
func structFields(t reflect.Type) map[string][]int {
	out := map[string][]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if opts == "inline" && f.Type.Kind() == reflect.Struct {
			for k, idx := range structFields(f.Type) {
				out[k] = append([]int{i}, idx...)
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = []int{i}
	}
	return out
}

func fieldList(t reflect.Type) string {
	names := make([]string, 0, t.NumField())
	for k := range structFields(t) {
		names = append(names, k)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	}
	return "value"
}

func scalarValue(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return n.Value
	}
	return ""
}

// trimPrefix drops a parser's repetition of the value from its message
// ("invalid rate \"10gigs\": unknown unit" becomes "unknown unit").
func trimPrefix(msg, value string) string {
	for _, p := range []string{strconv.Quote(value) + ": ", value + ": "} {
		if i := strings.Index(msg, p); i >= 0 && i < 32 {
			return msg[i+len(p):]
		}
	}
	return msg
}
