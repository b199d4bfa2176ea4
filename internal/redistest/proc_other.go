//go:build !linux

package redistest

import "os/exec"

// dieWithParent has no portable equivalent outside Linux; Main still stops
// every server when the tests end normally.
func dieWithParent(*exec.Cmd) {}
