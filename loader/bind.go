package loader

import (
	"fmt"
	"slices"
	"strings"
)

// Expect is one tensor an architecture expects to find in a checkpoint.
type Expect struct {
	// Name is the architecture's name for the tensor, after Spec.Rename.
	Name string
	// Shape is the exact shape required; empty for rank 0.
	Shape []uint64
	// Optional tensors may be absent; when present their shape is checked.
	Optional bool
}

// Spec declares what an architecture expects of a checkpoint's tensors. It is
// the whole binding mechanism: checkpoint quirks belong in Ignore and Rename
// (written next to the architecture's weights), never in its forward code.
type Spec struct {
	// Tensors lists the expected tensors.
	Tensors []Expect
	// Ignore lists prefixes of stored tensor names that belong to parts the
	// architecture does not implement ("mtp.", "model.visual."). They are
	// matched before Rename.
	Ignore []string
	// Rename maps a stored name to the architecture's name, for quirks such
	// as a missing or extra prefix or a codebook stored without ".weight".
	// nil keeps stored names.
	Rename func(stored string) string
}

// ErrBind is matched (errors.Is) by every *BindError.
var ErrBind error = &kind{name: "checkpoint does not match the architecture"}

// BindError reports every way a checkpoint differs from a Spec at once, so
// a user fixes them in one pass. Each list is sorted by name.
type BindError struct {
	Arch       string       // the architecture, as named to Bind
	Source     string       // the checkpoint folder or file, when known
	Missing    []Expect     // required tensors that are absent
	Mismatched []Mismatch   // tensors present with another shape
	Unexpected []TensorInfo // stored tensors neither expected nor ignored
	Duplicates []Duplicate  // expected tensors that two stored tensors rename onto
}

// Mismatch pairs an expected tensor with the stored tensor bound to it.
type Mismatch struct {
	Want Expect
	Got  TensorInfo // Got.Name is the stored name
}

// Duplicate is an expected tensor that two stored tensors rename onto.
type Duplicate struct {
	Name          string     // the architecture's name
	First, Second TensorInfo // the stored tensors, in checkpoint order
}

// Error returns a summary line, then one line per problem, each of the form
// "<arch>: tensor T expected shape [a, b], found [c, d] in <file>".
func (e *BindError) Error() string {
	var b strings.Builder
	src := ""
	if e.Source != "" {
		src = " " + e.Source
	}
	fmt.Fprintf(&b, "%s: checkpoint%s does not match: %d missing, %d mis-shaped, %d unexpected, %d duplicate tensors",
		e.Arch, src, len(e.Missing), len(e.Mismatched), len(e.Unexpected), len(e.Duplicates))
	for _, m := range e.Missing {
		fmt.Fprintf(&b, "\n%s: tensor %s expected shape %s, missing%s", e.Arch, m.Name, formatShape(m.Shape), strings.Replace(src, " ", " from ", 1))
	}
	for _, m := range e.Mismatched {
		fmt.Fprintf(&b, "\n%s: tensor %s expected shape %s, found %s%s in %s",
			e.Arch, m.Want.Name, formatShape(m.Want.Shape), formatShape(m.Got.Shape), storedAs(m), m.Got.Path)
	}
	for _, t := range e.Unexpected {
		fmt.Fprintf(&b, "\n%s: unexpected tensor %s %s in %s (not used by the architecture; ignore its prefix in the Spec if the checkpoint legitimately carries it)",
			e.Arch, t.Name, formatShape(t.Shape), t.Path)
	}
	for _, d := range e.Duplicates {
		fmt.Fprintf(&b, "\n%s: tensor %s is stored twice: as %s in %s and as %s in %s",
			e.Arch, d.Name, d.First.Name, d.First.Path, d.Second.Name, d.Second.Path)
	}
	return b.String()
}

func storedAs(m Mismatch) string {
	if m.Got.Name == m.Want.Name {
		return ""
	}
	return fmt.Sprintf(" (stored as %s)", m.Got.Name)
}

// Is reports whether target is ErrBind.
func (e *BindError) Is(target error) bool { return target == ErrBind }

// Bind matches the stored tensors have against spec and returns them keyed
// by the architecture's names. It reports every missing, mis-shaped,
// unexpected and duplicate tensor in one *BindError; it reads no tensor
// data. arch names the architecture in messages.
func Bind(arch string, have []TensorInfo, spec Spec) (map[string]TensorInfo, error) {
	return bind(arch, "", have, spec)
}

// Bind matches the checkpoint's tensors against spec, as the package-level
// Bind does, naming the checkpoint folder in the error.
func (c *Checkpoint) Bind(arch string, spec Spec) (map[string]TensorInfo, error) {
	return bind(arch, c.Dir, c.tensors, spec)
}

func bind(arch, source string, have []TensorInfo, spec Spec) (map[string]TensorInfo, error) {
	want := make(map[string]Expect, len(spec.Tensors))
	for _, x := range spec.Tensors {
		if _, dup := want[x.Name]; dup {
			return nil, fmt.Errorf("loader: %s: Spec lists tensor %s twice", arch, x.Name)
		}
		want[x.Name] = x
	}
	e := &BindError{Arch: arch, Source: source}
	bound := make(map[string]TensorInfo, len(spec.Tensors))
	for _, t := range have {
		if slices.ContainsFunc(spec.Ignore, func(p string) bool { return strings.HasPrefix(t.Name, p) }) {
			continue
		}
		name := t.Name
		if spec.Rename != nil {
			name = spec.Rename(name)
		}
		x, ok := want[name]
		switch {
		case !ok:
			e.Unexpected = append(e.Unexpected, t)
		case hasKey(bound, name):
			e.Duplicates = append(e.Duplicates, Duplicate{Name: name, First: bound[name], Second: t})
		case !slices.Equal(t.Shape, x.Shape):
			e.Mismatched = append(e.Mismatched, Mismatch{Want: x, Got: t})
			bound[name] = t // present, so not also "missing"
		default:
			bound[name] = t
		}
	}
	for _, x := range spec.Tensors {
		if !x.Optional && !hasKey(bound, x.Name) {
			e.Missing = append(e.Missing, x)
		}
	}
	if len(e.Missing)+len(e.Mismatched)+len(e.Unexpected)+len(e.Duplicates) > 0 {
		slices.SortFunc(e.Missing, func(a, b Expect) int { return strings.Compare(a.Name, b.Name) })
		slices.SortFunc(e.Mismatched, func(a, b Mismatch) int { return strings.Compare(a.Want.Name, b.Want.Name) })
		slices.SortFunc(e.Unexpected, func(a, b TensorInfo) int { return strings.Compare(a.Name, b.Name) })
		slices.SortFunc(e.Duplicates, func(a, b Duplicate) int { return strings.Compare(a.Name, b.Name) })
		return nil, e
	}
	return bound, nil
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}
