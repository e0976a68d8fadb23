package bpf

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/cilium/ebpf"
)

// SumPerCPU reads key of m, a per-CPU map whose values are counter
// structs of type T (bpf2go's mirror of the C struct), and adds every
// CPU's value into dst, a pointer to the caller's own struct. Each counter
// of T (a uint64, or an array of them) goes to the field of dst with the
// same name ignoring case: bpf2go spells unknown_qp UnknownQp, Go code
// UnknownQP. A counter of T with no such field in dst is an error, so a
// counter added or renamed on one side only cannot read 0 unseen; dst may
// have fields of its own.
func SumPerCPU[T any](m *ebpf.Map, key uint32, dst any) error {
	var per []T
	if err := m.Lookup(key, &per); err != nil {
		return fmt.Errorf("read %s: %w", m, err)
	}
	return sumInto(dst, per)
}

func sumInto[T any](dst any, per []T) error {
	dv := reflect.ValueOf(dst)
	if dv.Kind() != reflect.Pointer || dv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("sum counters: dst is %T, want a pointer to a struct", dst)
	}
	dv = dv.Elem()
	st := reflect.TypeFor[T]()
	if st.Kind() != reflect.Struct {
		return fmt.Errorf("sum counters: %v is not a struct", st)
	}
	type pair struct{ src, dst int }
	var pairs []pair
	for i := range st.NumField() {
		sf := st.Field(i)
		if !sf.IsExported() || !isCounter(sf.Type) {
			continue
		}
		df, ok := dv.Type().FieldByNameFunc(func(n string) bool { return strings.EqualFold(n, sf.Name) })
		if !ok || len(df.Index) != 1 || df.Type != sf.Type {
			return fmt.Errorf("sum counters: %v.%s (%v) has no field of that name and type in %v", st, sf.Name, sf.Type, dv.Type())
		}
		pairs = append(pairs, pair{i, df.Index[0]})
	}
	for i := range per {
		sv := reflect.ValueOf(&per[i]).Elem()
		for _, p := range pairs {
			add(dv.Field(p.dst), sv.Field(p.src))
		}
	}
	return nil
}

func isCounter(t reflect.Type) bool {
	return t.Kind() == reflect.Uint64 || t.Kind() == reflect.Array && isCounter(t.Elem())
}

func add(dst, src reflect.Value) {
	if dst.Kind() == reflect.Uint64 {
		dst.SetUint(dst.Uint() + src.Uint())
		return
	}
	for i := range dst.Len() {
		add(dst.Index(i), src.Index(i))
	}
}
