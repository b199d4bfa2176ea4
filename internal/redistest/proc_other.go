//go:build !linux

package redistest

import (
	"errors"
	"os/exec"
)

// dieWithParent has no portable equivalent outside Linux; Main still stops
// every server when the tests end normally.
func dieWithParent(*exec.Cmd) {}

var errNoPause = errors.New("redistest: pausing a server needs Linux")

// Pause is Linux-only (see proc_linux.go).
func (s *Server) Pause() error { return errNoPause }

// Resume is Linux-only (see proc_linux.go).
func (s *Server) Resume() error { return errNoPause }
