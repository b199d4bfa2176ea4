package redistest

import (
	"os/exec"
	"syscall"
)

// dieWithParent asks the kernel to kill the server when the test binary
// dies, so a killed or timed-out test run leaves no redis-server behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
