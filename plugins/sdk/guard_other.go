//go:build !unix

package sdk

import "os"

// guardStdout is a no-op where file descriptors cannot be redirected.
func guardStdout(*os.File) error { return nil }
