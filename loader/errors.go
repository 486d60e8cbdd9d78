package loader

import (
	"fmt"
	"strings"
)

// Error is a failure to read, validate or write a safetensors file, an index
// or a checkpoint folder. Kind is one of the Err* sentinels below, so callers
// test the situation with errors.Is (errors.Is(err, loader.ErrHeaderTooLarge))
// and reach the details with errors.As. An underlying cause (an *fs.PathError,
// a JSON syntax error) is also reachable through errors.Is/As.
type Error struct {
	File   string // the file or folder at fault; "" when writing to a plain io.Writer
	Tensor string // the tensor concerned; "" when the failure is not about one tensor
	Kind   error  // the situation: one of the Err* sentinels of this package
	Detail string // what was found and what would fix it
	Err    error  // underlying cause, or nil
}

// Error formats the failure as one line: the file, the tensor, what was
// found and what would fix it, then the rule of spec/safetensors.md (and the
// reference crate's name for it) when one applies.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Tensor != "" {
		fmt.Fprintf(&b, "tensor %q: ", e.Tensor)
	}
	b.WriteString(e.Detail)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if k, ok := e.Kind.(*kind); ok && k.rule != "" {
		fmt.Fprintf(&b, " (%s)", k.rule)
	}
	return b.String()
}

// Unwrap returns the kind and, when present, the underlying cause.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

// kind is the type of the Err* sentinels: a short name and, where the
// specification numbers the check, the rule it enforces.
type kind struct {
	name string
	rule string
}

func (k *kind) Error() string { return k.name }

// Sentinels for the user-facing situations of spec/safetensors.md section 7,
// checked before the numbered rules so a user gets the helpful message.
var (
	// ErrEmpty: the file has no bytes at all (a failed download or copy).
	ErrEmpty error = &kind{name: "empty file"}
	// ErrLFSPointer: the file is a Git LFS pointer, not the weights.
	ErrLFSPointer error = &kind{name: "Git LFS pointer"}
	// ErrNotSafetensors: the file is something else: HTML or JSON text (an
	// error page saved in place of the weights), or not a regular file.
	ErrNotSafetensors error = &kind{name: "not a safetensors file"}
)

// Sentinels for the reader's validation rules, spec/safetensors.md section 3,
// one per rule, in the order the rules are applied. The rule text of each
// names the reference crate's SafeTensorError variant.
var (
	ErrHeaderTooSmall               error = &kind{"header too small", "safetensors rule 1, HeaderTooSmall"}                        // file shorter than 8 bytes
	ErrHeaderTooLarge               error = &kind{"header too large", "safetensors rule 2, HeaderTooLarge"}                        // N > MaxHeaderSize
	ErrInvalidHeaderLength          error = &kind{"invalid header length", "safetensors rule 3, InvalidHeaderLength"}              // 8 + N past the end
	ErrInvalidHeader                error = &kind{"header is not UTF-8", "safetensors rule 4, InvalidHeader"}                      // header bytes not UTF-8
	ErrInvalidHeaderStart           error = &kind{"header does not start with '{'", "safetensors rule 5, InvalidHeaderStart"}      // first byte not '{'
	ErrInvalidHeaderDeserialization error = &kind{"malformed header", "safetensors rule 6, InvalidHeaderDeserialization"}          // JSON or entry shape wrong
	ErrDuplicateKey                 error = &kind{"duplicate key", "safetensors rule 7, duplicate key"}                            // a key repeated at any level
	ErrInvalidOffset                error = &kind{"invalid offset", "safetensors rule 8, InvalidOffset"}                           // gap, overlap or END < BEGIN
	ErrValidationOverflow           error = &kind{"size overflow", "safetensors rule 9, ValidationOverflow"}                       // shape × bits overflows uint64
	ErrMisalignedSlice              error = &kind{"misaligned sub-byte tensor", "safetensors rule 10, MisalignedSlice"}            // bits not a multiple of 8
	ErrTensorInvalidInfo            error = &kind{"size does not match shape and dtype", "safetensors rule 11, TensorInvalidInfo"} // END − BEGIN ≠ bytes
	ErrMetadataIncompleteBuffer     error = &kind{"data section length mismatch", "safetensors rule 12, MetadataIncompleteBuffer"} // truncated or trailing bytes
)

// Sentinels for data access after a successful Open.
var (
	// ErrTensorNotFound: the file or checkpoint has no tensor of that name.
	ErrTensorNotFound error = &kind{name: "tensor not found"}
	// ErrOutOfBounds: a tensor's bytes lie outside the file as it is now
	// (it shrank after Open). Validation makes this impossible for a file
	// that does not change; the check is defence in depth.
	ErrOutOfBounds error = &kind{name: "tensor bytes outside the file"}
	// ErrPart: a part asked of a tensor (Checkpoint.Part) does not fit it:
	// an axis or span out of range, or a cut inside a byte of a sub-byte
	// dtype.
	ErrPart error = &kind{name: "invalid part of a tensor"}
)

// ErrInvalidTensor: a tensor given to the writer is inconsistent (invalid
// dtype, data length not matching shape × dtype, duplicate or reserved name,
// invalid UTF-8).
var ErrInvalidTensor error = &kind{name: "invalid tensor for writing"}

// Sentinels for checkpoint folders and sharded indexes (spec/safetensors.md
// section 5).
var (
	// ErrNoWeights: neither an index nor model.safetensors (5.1), or a path
	// that is not a checkpoint at all.
	ErrNoWeights error = &kind{"no weights", "checkpoint rule 5.1.2"}
	// ErrInvalidIndex: the index is not the expected JSON, or repeats a key.
	ErrInvalidIndex error = &kind{"malformed index", "index rule 5.2.1"}
	// ErrInvalidShardPath: a weight_map shard path leaves the folder.
	ErrInvalidShardPath error = &kind{"invalid shard path", "index rule 5.2.2"}
	// ErrMissingShards: shards named by the index are absent.
	ErrMissingShards error = &kind{"checkpoint incomplete", "index rule 5.2.3"}
	// ErrIndexTensorMissing: an indexed tensor is not in its shard's header.
	ErrIndexTensorMissing error = &kind{"indexed tensor missing from its shard", "index rule 5.2.4"}
	// ErrInvalidConfig: config.json is not the expected JSON.
	ErrInvalidConfig error = &kind{name: "malformed config.json"}
)
