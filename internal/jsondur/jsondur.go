// Package jsondur writes configurations as JSON with every time.Duration as
// its text ("20s", "1m30s") rather than a count of nanoseconds, and reads
// both forms back, so files written before stay readable. It works on any
// struct through a shadow type built by reflection, field for field and tag
// for tag, so a configuration keeps one definition.
package jsondur

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"time"
)

// Duration is a time.Duration in JSON: "20s" out, "20s" or 20000000000 in.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration such as 20s or 1m30s", s)
		}
		*d = Duration(v)
		return nil
	}
	var ns int64
	if err := json.Unmarshal(b, &ns); err != nil {
		return fmt.Errorf("%s is not a duration such as \"20s\"", b)
	}
	*d = Duration(ns)
	return nil
}

// Marshal is json.Marshal with durations as text.
func Marshal(v any) ([]byte, error) {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return json.Marshal(v)
	}
	st := shadow(rv.Type())
	if st == rv.Type() {
		return json.Marshal(v)
	}
	s := reflect.New(st).Elem()
	copyValue(s, rv)
	return json.Marshal(s.Interface())
}

// Unmarshal is json.Unmarshal into the pointer v, durations read as text or
// as nanoseconds. Fields the data leaves out keep v's values.
func Unmarshal(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("jsondur: Unmarshal needs a non-nil pointer, got %T", v)
	}
	t := rv.Elem().Type()
	st := shadow(t)
	if st == t {
		return json.Unmarshal(data, v)
	}
	s := reflect.New(st)
	copyValue(s.Elem(), rv.Elem())
	if err := json.Unmarshal(data, s.Interface()); err != nil {
		return err
	}
	copyValue(rv.Elem(), s.Elem())
	return nil
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	shadowDur     = reflect.TypeFor[Duration]()
	marshalerType = reflect.TypeFor[json.Marshaler]()
	unmarshalType = reflect.TypeFor[json.Unmarshaler]()
	shadows       sync.Map // reflect.Type -> reflect.Type
)

// shadow is t with every time.Duration replaced by Duration; t itself when
// it holds none. Types with their own JSON methods are left alone.
func shadow(t reflect.Type) reflect.Type {
	if s, ok := shadows.Load(t); ok {
		return s.(reflect.Type)
	}
	s := makeShadow(t)
	shadows.Store(t, s)
	return s
}

func makeShadow(t reflect.Type) reflect.Type {
	if t == durationType {
		return shadowDur
	}
	if t.Implements(marshalerType) || reflect.PointerTo(t).Implements(unmarshalType) {
		return t
	}
	switch t.Kind() {
	case reflect.Struct:
		changed := false
		var fields []reflect.StructField
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				changed = true // left out: encoding/json ignores it anyway
				continue
			}
			if st := shadow(f.Type); st != f.Type {
				f.Type, changed = st, true
			}
			f.Index, f.Offset = nil, 0
			fields = append(fields, f)
		}
		if !changed {
			return t
		}
		return reflect.StructOf(fields)
	case reflect.Slice:
		if e := shadow(t.Elem()); e != t.Elem() {
			return reflect.SliceOf(e)
		}
	case reflect.Pointer:
		if e := shadow(t.Elem()); e != t.Elem() {
			return reflect.PointerTo(e)
		}
	case reflect.Map:
		if e := shadow(t.Elem()); e != t.Elem() {
			return reflect.MapOf(t.Key(), e)
		}
	}
	return t
}

// copyValue copies src into dst, of the same type or one's shadow, field by
// exported field name.
func copyValue(dst, src reflect.Value) {
	if dst.Type() == src.Type() {
		dst.Set(src)
		return
	}
	switch dst.Kind() {
	case reflect.Int64: // a duration and its shadow
		dst.SetInt(src.Int())
	case reflect.Struct:
		for i := range dst.NumField() {
			name := dst.Type().Field(i).Name
			if sf, ok := src.Type().FieldByName(name); ok && sf.IsExported() {
				copyValue(dst.Field(i), src.FieldByIndex(sf.Index))
			}
		}
	case reflect.Slice:
		if src.IsNil() {
			dst.SetZero()
			return
		}
		dst.Set(reflect.MakeSlice(dst.Type(), src.Len(), src.Len()))
		for i := range src.Len() {
			copyValue(dst.Index(i), src.Index(i))
		}
	case reflect.Pointer:
		if src.IsNil() {
			dst.SetZero()
			return
		}
		dst.Set(reflect.New(dst.Type().Elem()))
		copyValue(dst.Elem(), src.Elem())
	case reflect.Map:
		if src.IsNil() {
			dst.SetZero()
			return
		}
		dst.Set(reflect.MakeMapWithSize(dst.Type(), src.Len()))
		for it := src.MapRange(); it.Next(); {
			e := reflect.New(dst.Type().Elem()).Elem()
			copyValue(e, it.Value())
			dst.SetMapIndex(it.Key(), e)
		}
	}
}
