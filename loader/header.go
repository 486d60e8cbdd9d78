package loader

import (
	"encoding/json"
	"fmt"
)

// metadataKey is the reserved top-level header key holding free-form metadata.
const metadataKey = "__metadata__"

// rawTensor is one tensor entry as decoded from the header (rule 6), before
// the layout rules 8 to 12 have been applied.
type rawTensor struct {
	name       string
	dtype      DType
	shape      []uint64
	begin, end uint64
}

// header is a decoded safetensors header.
type header struct {
	metadata map[string]string // nil when the header has no __metadata__
	tensors  []rawTensor       // in header order
}

// parseHeader decodes a header's JSON (rules 6 and 7) with a token-level
// walk, so that a repeated key anywhere is seen and rejected: encoding/json
// would silently keep the last value. Rule 6 failures are reported where they
// occur; the first duplicate key is remembered and reported after the walk,
// so a header that breaks both rules fails with rule 6, as the rule order
// says. b must already be valid UTF-8 starting with '{' (rules 4 and 5).
func parseHeader(path string, b []byte) (*header, error) {
	w := newWalker(path, "header", b, ErrInvalidHeaderDeserialization, ErrDuplicateKey,
		"the file is corrupt or was not written by a safetensors writer")
	if off, ok := checkSurrogates(b); !ok {
		return nil, w.fail("", fmt.Sprintf("invalid \\u escape at byte %d of the header: a UTF-16 surrogate without its pair", off), nil)
	}
	if err := w.delim('{', "", "the header"); err != nil {
		return nil, err
	}
	h := &header{}
	seen := make(map[string]struct{})
	for w.dec.More() {
		key, err := w.key("")
		if err != nil {
			return nil, err
		}
		if _, dup := seen[key]; dup {
			tensor := key
			if key == metadataKey {
				tensor = ""
			}
			w.duplicate(tensor, fmt.Sprintf("key %q appears twice at the top level of the header", key))
		}
		seen[key] = struct{}{}
		if key == metadataKey {
			m, err := w.metadata()
			if err != nil {
				return nil, err
			}
			h.metadata = m
			continue
		}
		t, err := w.tensor(key)
		if err != nil {
			return nil, err
		}
		h.tensors = append(h.tensors, t)
	}
	if err := w.delim('}', "", "the header"); err != nil {
		return nil, err
	}
	if err := w.finish(b); err != nil {
		return nil, err
	}
	return h, nil
}

// metadata reads the __metadata__ value: an object of strings. null is
// accepted as "no metadata", as the reference crate does.
func (w *walker) metadata() (map[string]string, error) {
	tok, err := w.token("")
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, w.fail("", fmt.Sprintf("__metadata__ must be an object of strings, found %s", describe(tok)), nil)
	}
	m := make(map[string]string)
	for w.dec.More() {
		k, err := w.key("")
		if err != nil {
			return nil, err
		}
		tok, err := w.token("")
		if err != nil {
			return nil, err
		}
		v, ok := tok.(string)
		if !ok {
			return nil, w.fail("", fmt.Sprintf("__metadata__ value of %q must be a string, found %s", k, describe(tok)), nil)
		}
		if _, dup := m[k]; dup {
			w.duplicate("", fmt.Sprintf("key %q appears twice in __metadata__", k))
		}
		m[k] = v
	}
	return m, w.delim('}', "", "__metadata__")
}

// tensor reads one tensor entry: dtype, shape and data_offsets are required;
// other fields are skipped, as the reference crate ignores them.
func (w *walker) tensor(name string) (rawTensor, error) {
	t := rawTensor{name: name}
	if err := w.delim('{', name, "a tensor entry"); err != nil {
		return t, err
	}
	var haveDType, haveShape, haveOffsets bool
	for w.dec.More() {
		field, err := w.key(name)
		if err != nil {
			return t, err
		}
		var repeated bool
		switch field {
		case "dtype":
			repeated, haveDType = haveDType, true
			tok, err := w.token(name)
			if err != nil {
				return t, err
			}
			s, ok := tok.(string)
			if !ok {
				return t, w.fail(name, fmt.Sprintf("dtype must be a string, found %s", describe(tok)), nil)
			}
			d, ok := ParseDType(s)
			if !ok {
				return t, w.fail(name, fmt.Sprintf("unknown dtype %q (known: BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_*, I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64)", s), nil)
			}
			t.dtype = d
		case "shape":
			repeated, haveShape = haveShape, true
			if t.shape, err = w.uints(name, field, -1); err != nil {
				return t, err
			}
			if t.shape == nil {
				t.shape = []uint64{} // rank 0: one element, not "no shape"
			}
		case "data_offsets":
			repeated, haveOffsets = haveOffsets, true
			off, err := w.uints(name, field, 2)
			if err != nil {
				return t, err
			}
			t.begin, t.end = off[0], off[1]
		default:
			if err := w.skip(name); err != nil {
				return t, err
			}
		}
		if repeated {
			w.duplicate(name, fmt.Sprintf("field %q appears twice in the tensor entry", field))
		}
	}
	if err := w.delim('}', name, "a tensor entry"); err != nil {
		return t, err
	}
	for _, f := range []struct {
		have bool
		name string
	}{{haveDType, "dtype"}, {haveShape, "shape"}, {haveOffsets, "data_offsets"}} {
		if !f.have {
			return t, w.fail(name, fmt.Sprintf("tensor entry has no %q field", f.name), nil)
		}
	}
	return t, nil
}
