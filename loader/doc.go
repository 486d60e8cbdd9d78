// Package loader reads and writes safetensors files and opens Hugging Face
// checkpoint folders, validating everything before any tensor data is used.
//
// It is a port of the safetensors format and of every validation rule of the
// reference Rust crate (spec/safetensors.md), stricter where Go's JSON
// decoder would be lax: headers and indexes are walked token by token, so a
// repeated key is an error, and numbers must be plain non-negative integers.
// Header bytes are untrusted: nothing is allocated from the header length
// before it has been bounded, and every slice into a file is bounds-checked.
//
// The pieces, each in its own file:
//
//   - Open reads one .safetensors file's header and returns a File: the
//     tensors (name, dtype, shape, absolute offset, size) in file order and
//     the metadata. Tensor bytes are reached lazily through File.Bytes (a
//     read-only mmap) or File.Reader; the data section is never read to
//     validate. (reader.go, header.go, dtype.go)
//   - Write and WriteFile produce files byte-identical to the reference
//     crate's for the same input; NewWriter and Create write the same files
//     from tensor headers, the bytes streamed after them, so a large file
//     never has to be in memory. (writer.go)
//   - ReadIndex decodes model.safetensors.index.json and WriteIndex writes
//     one; OpenCheckpoint opens a checkpoint folder (single file or shards,
//     config.json, generation and tokenizer files) as one name → tensor
//     map. (index.go, checkpoint.go)
//   - Bind checks a checkpoint against what an architecture declares and
//     reports every missing, unexpected and mis-shaped tensor at once.
//     (bind.go)
//
// Every failure is an *Error (or a *BindError) whose Kind is one of the Err*
// sentinels, so callers can use errors.Is and errors.As; messages name the
// file, the tensor, the rule and what would fix it. The package never prints;
// it logs through log/slog (debug for ignored shard tensors, a warning for a
// wrong or malformed index total_size).
package loader
