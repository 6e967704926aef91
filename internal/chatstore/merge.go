package chatstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nexus-run/nexus/internal/transcript"
)

// ErrInvalid is returned for a patch or value that does not fit the format.
var ErrInvalid = errors.New("invalid")

// patchObject turns a patch given as json.RawMessage, []byte or any value that marshals
// to a JSON object into its members, compacted (no HTML escaping, as JSON.stringify).
func patchObject(patch any) (map[string]json.RawMessage, error) {
	var raw []byte
	switch p := patch.(type) {
	case nil:
		return nil, fmt.Errorf("%w patch: nil", ErrInvalid)
	case json.RawMessage:
		raw = p
	case []byte:
		raw = p
	default:
		b, err := transcript.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("%w patch: %w", ErrInvalid, err)
		}
		raw = b
	}
	var c bytes.Buffer
	if err := json.Compact(&c, raw); err != nil {
		return nil, fmt.Errorf("%w patch: %w", ErrInvalid, err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(c.Bytes(), &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("%w patch: a merge patch must be a JSON object", ErrInvalid)
	}
	return obj, nil
}

// mergePatch applies an RFC 7386 JSON merge patch to target (nil: absent). It returns the
// result and false when the result is "absent" (a null patch deletes). Members the patch does
// not name keep their bytes.
func mergePatch(target, patch json.RawMessage) (json.RawMessage, bool, error) {
	if isNull(patch) {
		return nil, false, nil
	}
	if !isObject(patch) {
		return patch, true, nil
	}
	var pobj map[string]json.RawMessage
	if err := json.Unmarshal(patch, &pobj); err != nil {
		return nil, false, fmt.Errorf("%w patch: %w", ErrInvalid, err)
	}
	var tobj map[string]json.RawMessage
	if isObject(target) {
		if err := json.Unmarshal(target, &tobj); err != nil {
			return nil, false, fmt.Errorf("merge into %s: %w", target, err)
		}
	}
	if tobj == nil {
		tobj = map[string]json.RawMessage{}
	}
	if err := mergeMembers(tobj, pobj); err != nil {
		return nil, false, err
	}
	return encodeObject(tobj), true, nil
}

// mergeMembers applies the members of a merge patch to an object's members in place.
func mergeMembers(obj, patch map[string]json.RawMessage) error {
	for k, pv := range patch {
		v, keep, err := mergePatch(obj[k], pv)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		if keep {
			obj[k] = v
		} else {
			delete(obj, k)
		}
	}
	return nil
}

// encodeObject writes members compactly, keys sorted, values verbatim.
func encodeObject(obj map[string]json.RawMessage) json.RawMessage {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(&b, k)
		b.WriteByte(':')
		b.Write(obj[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}
