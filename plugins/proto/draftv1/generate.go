// Package draftv1 holds the generated Go code of the draft plugin wire
// protocol, version 1 (package specula.plugin.draft.v1, draft.proto). The
// generated files are committed, so building needs no protoc; regenerate
// after editing draft.proto with `go generate ./plugins/proto/...` (needs
// protoc, protoc-gen-go and protoc-gen-go-grpc; see README.md).
package draftv1

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative draft.proto
