package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/surgekit/surge/internal/hashtag"
)

// Suffixes of a read-write lock's keys, besides the lock key and its fence.
const (
	readersSuffix        = ":readers"
	writerWaitingSuffix  = ":writer-waiting"
	readersWaitingSuffix = ":readers-waiting"
)

// An RWLock is a read-write lock: any number of readers, or one writer.
// Each reader holds a share of its own, a Lease with its own token and
// expiry, so a crashed reader's share runs out by itself; the writer's
// Lease is a lock's, with a fence. Renewal (AutoRenew, Extend), loss
// signals and waiting work as for a lock.
//
// A writer that has to wait for readers keeps new readers out until it
// has had its turn, so a steady stream of readers cannot starve it; a
// writer that stops coming back (it died) releases the readers after its
// last wait. Readers receive the fence of the last writer: proof of which
// write they read after.
//
// An RWLock and a plain lock of the same name share the lock key: do not
// mix them. An RWLock is safe for concurrent use.
type RWLock struct {
	c    *Client
	name string
	key  string

	// Script arguments, boxed once.
	keyArg, fenceKeyArg, readersKeyArg, writerWaitingArg, readersWaitingArg any
}

// RWLock returns the read-write lock called name. It does not touch Redis.
func (c *Client) RWLock(name string) (*RWLock, error) {
	if err := hashtag.CheckName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	key := hashtag.Key(c.prefix, name, "")
	return &RWLock{
		c:                 c,
		name:              name,
		key:               key,
		keyArg:            key,
		fenceKeyArg:       key + fenceSuffix,
		readersKeyArg:     key + readersSuffix,
		writerWaitingArg:  key + writerWaitingSuffix,
		readersWaitingArg: key + readersWaitingSuffix,
	}, nil
}

// TryRLock makes one attempt to take a read share for ttl. It returns
// ErrNotObtained at once if a writer holds the lock or waits for it.
func (rw *RWLock) TryRLock(ctx context.Context, ttl time.Duration, opts ...LockOption) (*Lease, error) {
	return rw.try(ctx, ttl, opts, true)
}

// RLock takes a read share for ttl, waiting as long as ctx allows (see
// Client.Lock for how waiters wait).
func (rw *RWLock) RLock(ctx context.Context, ttl time.Duration, opts ...LockOption) (*Lease, error) {
	l, err := rw.newLease(ctx, ttl, opts, true)
	if err != nil {
		return nil, err
	}
	return rw.c.wait(ctx, l, false)
}

// TryLock makes one attempt to take the write side for ttl. It returns
// ErrNotObtained at once if a writer or any reader holds the lock; it
// does not keep readers out (only a waiting Lock does).
func (rw *RWLock) TryLock(ctx context.Context, ttl time.Duration, opts ...LockOption) (*Lease, error) {
	return rw.try(ctx, ttl, opts, false)
}

// Lock takes the write side for ttl, waiting as long as ctx allows. While
// it waits, no new reader gets in.
func (rw *RWLock) Lock(ctx context.Context, ttl time.Duration, opts ...LockOption) (*Lease, error) {
	l, err := rw.newLease(ctx, ttl, opts, false)
	if err != nil {
		return nil, err
	}
	l.waits = true
	return rw.c.wait(ctx, l, false)
}

func (rw *RWLock) try(ctx context.Context, ttl time.Duration, opts []LockOption, reader bool) (*Lease, error) {
	l, err := rw.newLease(ctx, ttl, opts, reader)
	if err != nil {
		return nil, err
	}
	return rw.c.try(ctx, l)
}

func (rw *RWLock) newLease(ctx context.Context, ttl time.Duration, opts []LockOption, reader bool) (*Lease, error) {
	lc, token, err := plainLease(ctx, ttl, opts, "a read-write lock")
	if err != nil {
		return nil, err
	}
	l := baseLease(ctx, token, ttl, lc)
	l.c, l.rw, l.reader, l.name = rw.c, rw, reader, rw.name
	l.key = rw.key // waiters queue, and are woken, on the lock key
	l.keyArg, l.fenceKeyArg = rw.keyArg, rw.fenceKeyArg
	if reader {
		l.keyArg = rw.readersKeyArg // a share lives in the readers' set
	}
	return l, nil
}

// acquire runs the read or write script once for l: like acquireScript,
// a fence when obtained, else -2 minus the wait.
func (rw *RWLock) acquire(ctx context.Context, l *Lease, flag string) (int64, error) {
	s := rwWriteScript
	if l.reader {
		s = rwReadScript
	}
	waits := "0"
	if l.waits {
		waits = "1"
	}
	args := append(s.Args(5, 9), rw.keyArg, rw.fenceKeyArg, rw.readersKeyArg, rw.writerWaitingArg, rw.readersWaitingArg,
		l.tokenArg, l.ttlArg, flag, waits)
	res, err := s.Int(ctx, rw.c.rdb, args)
	if err == nil && res == 0 {
		err = errors.New("lock: read-write acquire script replied 0")
	}
	return res, err
}

// releaseShare runs rw_read_release.lua for the reader l.
func (rw *RWLock) releaseShare(ctx context.Context, l *Lease) (int64, error) {
	args := append(rwReadReleaseScript.Args(3, 4), rw.readersKeyArg, rw.writerWaitingArg, rw.keyArg, l.tokenArg)
	return rwReadReleaseScript.Int(ctx, rw.c.rdb, args)
}
