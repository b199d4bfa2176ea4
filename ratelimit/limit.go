package ratelimit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Algorithm is how a Limit counts.
type Algorithm int

const (
	// GCRA, the generic cell rate algorithm, spaces requests evenly at
	// Rate per Period and lets Burst of them come at once. It keeps one
	// timestamp per key. The default.
	GCRA Algorithm = iota
	// FixedWindow counts requests in windows of Period that start at a
	// key's first request; at most Rate per window. One counter per key;
	// up to 2×Rate can pass around a window's edge.
	FixedWindow
	// SlidingLog keeps the time of every request of the last Period and
	// admits at most Rate of them in any Period: exact, and memory grows
	// with Rate.
	SlidingLog
	// SlidingWindow weighs the previous fixed window's count by how much
	// of it still overlaps the last Period: nearly as smooth as a sliding
	// log, in constant memory.
	SlidingWindow
)

// String returns the algorithm's name, as in "sliding-log".
func (a Algorithm) String() string {
	switch a {
	case GCRA:
		return "gcra"
	case FixedWindow:
		return "fixed-window"
	case SlidingLog:
		return "sliding-log"
	case SlidingWindow:
		return "sliding-window"
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// code is the algorithm's name in scripts and keys.
func (a Algorithm) code() string {
	return [...]string{"g", "f", "l", "w"}[a]
}

// Limit is a rate: Rate requests per Period, counted by Algorithm.
type Limit struct {
	// Rate is how many requests Period admits (at least 1).
	Rate int64
	// Period is the span Rate is counted over: at least 1 ms, in whole
	// microseconds.
	Period time.Duration
	// Burst is how many requests GCRA admits at once after a quiet spell;
	// zero means Rate. The other algorithms ignore it (their burst is
	// Rate).
	Burst int64
	// Algorithm is how requests are counted; the zero value is GCRA.
	Algorithm Algorithm
}

// PerSecond returns a GCRA limit of n requests a second, n at once.
func PerSecond(n int64) Limit { return Per(n, time.Second) }

// PerMinute returns a GCRA limit of n requests a minute, n at once.
func PerMinute(n int64) Limit { return Per(n, time.Minute) }

// PerHour returns a GCRA limit of n requests an hour, n at once.
func PerHour(n int64) Limit { return Per(n, time.Hour) }

// Per returns a GCRA limit of n requests per period, n at once.
func Per(n int64, period time.Duration) Limit { return Limit{Rate: n, Period: period} }

// WithBurst returns the limit admitting b requests at once.
func (l Limit) WithBurst(b int64) Limit { l.Burst = b; return l }

// Using returns the limit counted by a.
func (l Limit) Using(a Algorithm) Limit { l.Algorithm = a; return l }

// String describes the limit for logs and errors, as in
// "10/1s burst 20 (gcra)".
func (l Limit) String() string {
	s := strconv.FormatInt(l.Rate, 10) + "/" + l.Period.String()
	if l.Algorithm == GCRA && l.Burst != 0 && l.Burst != l.Rate {
		s += " burst " + strconv.FormatInt(l.Burst, 10)
	}
	return s + " (" + l.Algorithm.String() + ")"
}

// burst is the most a key may take at once.
func (l Limit) burst() int64 {
	if l.Algorithm == GCRA && l.Burst != 0 {
		return l.Burst
	}
	return l.Rate
}

// policyWindow is the window w of the limit's RateLimit-Policy, whose
// quota q is the burst: the time the rate takes to earn a whole burst,
// which is Period when the burst is the rate. A client that sends q
// requests every w is never refused. With w = Period, a burst above the
// rate (10 per second, burst 100) would promise the client 100 a second.
func (l Limit) policyWindow() time.Duration {
	b := l.burst()
	if b == l.Rate {
		return l.Period
	}
	// check() keeps burst × Period in µs within int64.
	return time.Duration((b*l.Period.Microseconds()+l.Rate-1)/l.Rate) * time.Microsecond
}

// maxExact bounds the integers the scripts compute with: Lua numbers are
// doubles, exact up to 2^53.
const maxExact = 1 << 52

// check reports why the limit cannot be enforced exactly, or nil.
func (l Limit) check() error {
	switch {
	case l.Algorithm < GCRA || l.Algorithm > SlidingWindow:
		return fmt.Errorf("%w: unknown algorithm %d", ErrInvalid, int(l.Algorithm))
	case l.Rate <= 0:
		return fmt.Errorf("%w: rate %d must be positive", ErrInvalid, l.Rate)
	case l.Period < time.Millisecond:
		return fmt.Errorf("%w: period %v is below 1ms", ErrInvalid, l.Period)
	case l.Period%time.Microsecond != 0:
		return fmt.Errorf("%w: period %v is not a whole number of microseconds", ErrInvalid, l.Period)
	case l.Burst < 0:
		return fmt.Errorf("%w: burst %d is negative", ErrInvalid, l.Burst)
	}
	// GCRA computes in 1/Rate microseconds, up to Burst periods ahead; the
	// sliding window compares Rate × Period.
	if n := l.burst(); n > maxExact/l.Period.Microseconds() {
		return fmt.Errorf("%w: %v: burst × period exceeds %d microseconds, beyond exact arithmetic", ErrInvalid, l, int64(maxExact))
	}
	if l.Rate > maxExact/l.Period.Microseconds() {
		return fmt.Errorf("%w: %v: rate × period exceeds %d microseconds, beyond exact arithmetic", ErrInvalid, l, int64(maxExact))
	}
	return nil
}

// writeID writes the limit's name in its key, so that two limits on one
// key count apart: algorithm, rate, period in µs and, for GCRA, burst.
func (l Limit) writeID(b *strings.Builder) {
	var num [20]byte
	b.WriteString(l.Algorithm.code())
	b.Write(strconv.AppendInt(num[:0], l.Rate, 10))
	b.WriteByte('/')
	b.Write(strconv.AppendInt(num[:0], l.Period.Microseconds(), 10))
	if l.Algorithm == GCRA {
		b.WriteByte('b')
		b.Write(strconv.AppendInt(num[:0], l.burst(), 10))
	}
}
