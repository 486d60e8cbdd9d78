package model

import (
	"fmt"
	"slices"
	"strings"
)

// Capability names an interface of this package as manifests spell it.
type Capability string

// The capabilities, one per interface.
const (
	CapModel       Capability = "model"        // Model
	CapDraftTarget Capability = "draft-target" // DraftTarget
	CapDraft       Capability = "draft"        // Draft
	CapBlockDraft  Capability = "block-draft"  // BlockDraft
	CapSelector    Capability = "selector"     // Selector
)

// AllCapabilities lists every capability in a fixed order.
var AllCapabilities = []Capability{CapModel, CapDraftTarget, CapDraft, CapBlockDraft, CapSelector}

// InterfaceName is the Go interface a capability stands for.
func (c Capability) InterfaceName() string {
	switch c {
	case CapModel:
		return "model.Model"
	case CapDraftTarget:
		return "model.DraftTarget"
	case CapDraft:
		return "model.Draft"
	case CapBlockDraft:
		return "model.BlockDraft"
	case CapSelector:
		return "model.Selector"
	}
	return "unknown"
}

// ParseCapability checks a capability name.
func ParseCapability(s string) (Capability, error) {
	for _, c := range AllCapabilities {
		if string(c) == s {
			return c, nil
		}
	}
	names := make([]string, len(AllCapabilities))
	for i, c := range AllCapabilities {
		names[i] = string(c)
	}
	return "", fmt.Errorf("unknown capability %q (known: %s)", s, strings.Join(names, ", "))
}

// Has reports whether v implements the interface of c.
func (c Capability) Has(v any) bool {
	switch c {
	case CapModel:
		_, ok := v.(Model)
		return ok
	case CapDraftTarget:
		_, ok := v.(DraftTarget)
		return ok
	case CapDraft:
		_, ok := v.(Draft)
		return ok
	case CapBlockDraft:
		_, ok := v.(BlockDraft)
		return ok
	case CapSelector:
		_, ok := v.(Selector)
		return ok
	}
	return false
}

// CapabilitiesOf computes v's capability record by type assertion, in the
// order of AllCapabilities.
func CapabilitiesOf(v any) Capabilities {
	var out Capabilities
	for _, c := range AllCapabilities {
		if c.Has(v) {
			out = append(out, c)
		}
	}
	return out
}

// Capabilities is a set of capabilities (a record or a declaration).
type Capabilities []Capability

// Contains reports whether c is in the set.
func (cs Capabilities) Contains(c Capability) bool { return slices.Contains(cs, c) }

// String joins the names with commas.
func (cs Capabilities) String() string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = string(c)
	}
	return strings.Join(names, ", ")
}
