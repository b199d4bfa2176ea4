package script

import "sync/atomic"

// A SendCount is a script argument that counts how many times go-redis
// wrote its command to a connection. go-redis writes a command again when
// the reply to the last write was lost (a broken connection or a read
// timeout, up to Options.MaxRetries times) and when a cluster redirects
// it (MOVED, ASK), all out of the caller's sight, and a lost reply may
// belong to a run that happened: a command written more than once may
// have run more than once. A script whose reply would then mislead (one
// that reports what it changed, which a second run finds done) can tell,
// at no cost to Redis, where keeping each reply in Redis for a resend to
// find would cost a key per call.
//
// On the wire it is the string it wraps. go-redis's writer reads it
// through encoding.BinaryMarshaler, once per write; String, which hooks
// and loggers that print commands use, counts nothing. Use one per
// command, send it with Script's own methods (Ints, IntsEach, ...), which
// take back the writes answered NOSCRIPT, and read Resent once the
// command has returned.
type SendCount struct {
	v []byte
	n atomic.Int32
}

// NewSendCount returns a SendCount whose value on the wire is v. It keeps
// v, which must not change (one v may serve every command).
func NewSendCount(v []byte) *SendCount {
	return &SendCount{v: v}
}

// MarshalBinary counts one write and returns the value.
func (c *SendCount) MarshalBinary() ([]byte, error) {
	c.n.Add(1)
	return c.v, nil
}

// String returns the value.
func (c *SendCount) String() string { return string(c.v) }

// Resent reports whether the command was written more than once, not
// counting writes the server answered NOSCRIPT (which ran nothing): if so,
// a run before the one whose reply the caller has may have happened.
func (c *SendCount) Resent() bool { return c.n.Load() > 1 }

// notRun takes back one write of each SendCount in args: the command was
// answered NOSCRIPT, so that write ran nothing.
func notRun(args []any) {
	for _, a := range args {
		if c, ok := a.(*SendCount); ok {
			c.n.Add(-1)
		}
	}
}
