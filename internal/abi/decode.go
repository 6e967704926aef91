package abi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// MaxRequestBody bounds every request body the gateway reads.
const MaxRequestBody = 1 << 20

// DecodeStrict decodes one JSON value from data into v and refuses what encoding/json would let
// through silently: unknown fields, fields spelled in another case, duplicate fields, trailing
// data. The key check walks the value alongside v's type, so nested objects are checked too.
func DecodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("empty body: a JSON object is required")
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return errors.New("null body: a JSON object is required")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := checkKeys(dec, reflect.TypeOf(v), "$", 0); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	dec = json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("field %q: expected %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return fmt.Errorf("decode JSON: %w", err)
	}
	return nil
}

var rawMessageType = reflect.TypeOf(json.RawMessage(nil))

// maxDepth bounds the nesting of a request body. Without it a body of brackets alone costs
// memory quadratic in its depth (every level holds its path), enough to kill the gateway.
const maxDepth = 100

// checkKeys consumes one JSON value from dec, verifying object keys against t.
func checkKeys(dec *json.Decoder, t reflect.Type, path string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("JSON nested deeper than %d levels at %s", maxDepth, path)
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("malformed JSON at %s: %w", path, err)
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if t == rawMessageType || t == nil || t.Kind() == reflect.Interface {
		t = nil // accept any shape
	}
	switch delim {
	case '{':
		var fields map[string]reflect.Type
		var elem reflect.Type
		if t != nil {
			switch t.Kind() {
			case reflect.Struct:
				fields = structFields(t)
			case reflect.Map:
				elem = t.Elem()
			}
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return fmt.Errorf("malformed JSON at %s: %w", path, err)
			}
			key, _ := kt.(string)
			if seen[key] {
				return fmt.Errorf("duplicate field %q at %s", key, path)
			}
			seen[key] = true
			next := elem
			if fields != nil {
				ft, ok := fields[key]
				if !ok {
					return fmt.Errorf("unknown field %q at %s", key, path)
				}
				next = ft
			}
			if err := checkKeys(dec, next, path+"."+key, depth+1); err != nil {
				return err
			}
		}
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := checkKeys(dec, elem, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // closing delimiter
		return fmt.Errorf("malformed JSON at %s: %w", path, err)
	}
	return nil
}

func structFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			n, _, _ := strings.Cut(tag, ",")
			if n == "-" {
				continue
			}
			if n != "" {
				name = n
			}
		}
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			for k, v := range structFields(f.Type) {
				out[k] = v
			}
			continue
		}
		out[name] = f.Type
	}
	return out
}
