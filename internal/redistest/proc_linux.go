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

// Pause stops the server's process (SIGSTOP) without closing its sockets,
// as a hung machine or a network black hole would: connections stay open
// and commands get no reply until Resume. Stop kills it, paused or not.
func (s *Server) Pause() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume lets a paused server go on.
func (s *Server) Resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }
