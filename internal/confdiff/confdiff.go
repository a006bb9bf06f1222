// Package confdiff lists the settings in which two configurations differ,
// named as their files name them (the JSON keys, "nemesis.fault"), with
// values as a user writes them ("20s", "3-10"), so that a comparison of
// two runs says first what was not the same.
package confdiff

import (
	"fmt"
	"reflect"
	"strings"
)

// Change is one setting that differs.
type Change struct {
	Key  string
	A, B string
}

func (c Change) String() string { return fmt.Sprintf("%s %s → %s", c.Key, c.A, c.B) }

// Diff compares a and b, values of one struct type, field by field; keys
// in skip (and fields without a JSON name) are left out.
func Diff(a, b any, skip ...string) []Change {
	fa, fb := map[string]string{}, map[string]string{}
	var keys []string
	flatten(reflect.ValueOf(a), "", fa, &keys)
	flatten(reflect.ValueOf(b), "", fb, nil)
	var out []Change
	for _, k := range keys {
		if fa[k] != fb[k] && !skipped(k, skip) {
			out = append(out, Change{k, fa[k], fb[k]})
		}
	}
	return out
}

func skipped(k string, skip []string) bool {
	for _, s := range skip {
		if k == s || strings.HasPrefix(k, s+".") {
			return true
		}
	}
	return false
}

var stringer = reflect.TypeFor[fmt.Stringer]()

// flatten writes v's settings into out under prefix, noting the order of
// the keys when keys is not nil.
func flatten(v reflect.Value, prefix string, out map[string]string, keys *[]string) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			put(prefix, "none", out, keys)
			return
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || v.Type().Implements(stringer) {
		put(prefix, text(v), out, keys)
		return
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		if prefix != "" {
			name = prefix + "." + name
		}
		flatten(v.Field(i), name, out, keys)
	}
}

func put(k, v string, out map[string]string, keys *[]string) {
	out[k] = v
	if keys != nil {
		*keys = append(*keys, k)
	}
}

// text writes one value as a user would: a Stringer's String, a list as
// its elements with commas, a struct as its fields.
func text(v reflect.Value) string {
	if v.Type().Implements(stringer) {
		return v.Interface().(fmt.Stringer).String()
	}
	switch v.Kind() {
	case reflect.Slice, reflect.Array:
		if v.Len() == 0 {
			return "[]"
		}
		parts := make([]string, v.Len())
		for i := range v.Len() {
			parts[i] = text(v.Index(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case reflect.String:
		if v.String() == "" {
			return `""`
		}
	case reflect.Func, reflect.Chan:
		return ""
	}
	return fmt.Sprint(v.Interface())
}
