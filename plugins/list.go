package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"time"

	"github.com/specula-dev/specula/plugins/sdk"
)

// describeTimeout bounds a `describe` run when listing plugins (a variable
// for tests).
var describeTimeout = 10 * time.Second

// Listing is one discovered plugin binary with what it says about itself.
type Listing struct {
	Candidate
	// Description is the binary's answer to `describe`, when it gave one.
	Description *sdk.Description
	// Status is "ok", or why the binary cannot be used.
	Status string
}

// List discovers the plugins in dirs and runs each usable binary with the
// argument `describe` (without the handshake cookie, so it only describes
// itself) to fill in its protocol, architectures and capabilities. The
// description must agree with the file name.
func List(ctx context.Context, dirs []string) ([]Listing, error) {
	cands, err := Discover(dirs)
	if err != nil {
		return nil, err
	}
	out := make([]Listing, len(cands))
	for i, c := range cands {
		l := Listing{Candidate: c, Status: "ok"}
		switch {
		case !c.Usable():
			l.Status = c.Problem
		case !c.Compatible():
			l.Status = c.incompatibility()
		default:
			d, err := DescribeBinary(ctx, c.Path)
			switch {
			case err != nil:
				l.Status = err.Error()
			case d.Name != c.File.Name || d.Version != c.File.Version:
				l.Status = fmt.Sprintf("describes itself as %s v%s, but its file name says %s v%s", d.Name, d.Version, c.File.Name, c.File.Version)
			case d.ProtocolVersion != sdk.ProtocolVersion:
				l.Status = fmt.Sprintf("speaks protocol %d; this host speaks %d", d.ProtocolVersion, sdk.ProtocolVersion)
			}
			l.Description = d
		}
		out[i] = l
	}
	return out, nil
}

// DescribeBinary runs a plugin binary with the argument `describe` and
// parses its JSON description. Its errors are one short line for a table's
// status column: a binary that is not a plugin answers with its usage, which
// is left out (run the binary by hand to see it).
func DescribeBinary(ctx context.Context, path string) (*sdk.Description, error) {
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "describe")
	cmd.Env = []string{} // no cookie: the binary only describes itself
	ownProcessGroup(cmd)
	cmd.Cancel = func() error { return killProcess(cmd.Process) }
	// A child the binary started may hold its output open after the kill.
	cmd.WaitDelay = time.Second
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	err := cmd.Run()
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, fmt.Errorf("`describe` timed out after %v; is it a specula plugin?", describeTimeout)
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		return nil, fmt.Errorf("`describe` failed (%v); is it a specula plugin?", err)
	}
	var d sdk.Description
	if err := json.Unmarshal(stdout.Bytes(), &d); err != nil {
		return nil, errors.New("`describe` printed no JSON description; is it a specula plugin?")
	}
	return &d, nil
}
