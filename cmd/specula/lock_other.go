//go:build !unix

package main

// lockFile is a no-op where flock is not available: concurrent demos may
// then both build the cache (each in its own temporary folder; the first
// rename wins).
func lockFile(string) (unlock func(), err error) { return func() {}, nil }
