package counter

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
)

// Versioned values: optimistic concurrency for data that several writers
// edit (a team's shared wish list). Each value is one Redis hash,
// prefix{key}:v, with the fields data (the bytes), ver (the version, in
// decimal), w (a random token of the call that wrote them, in hex; values
// written before w was kept lack it, and work as before) and c (the token of
// the call that created the value). A deleted value's hash keeps only w, c
// and its last version as dver, for five minutes (CompareAndDelete). Every
// write runs in one script that compares the stored version with the one the
// writer read and, only if they are equal, writes the data under a new
// version stamped from Redis's clock. A writer that read a value someone has
// since changed gets ErrConflict instead of overwriting that change: it
// loads the value again, reapplies its edit and retries.

// versionedSuffix ends the key of a versioned value's hash.
const versionedSuffix = ":v"

// A version is microseconds*versionSeqs + sequence.
const versionSeqs = 1000

// maxVersionMicros bounds the microseconds part of a version: below 2^53,
// Lua's doubles hold it exactly, and microseconds*1000 + 999 fits an int64.
// It is a date in the year 2255.
const maxVersionMicros = 1<<53 - 1

// Version identifies one write of a versioned value. 0 means the value does
// not exist.
//
// A version is the time of the write by Redis's clock, in microseconds
// since the Unix epoch, times 1000, plus a sequence number (0 to 999) that
// tells apart writes in the same microsecond: each write's version is the
// larger of now*1000 and the previous version + 1. So the versions of one
// value only grow, even if Redis's clock steps back, and Version.Time tells
// when a write happened. Compare versions of one value with < and ==;
// versions of different values are unrelated.
//
// A value written within five minutes of its deletion gets a version past
// the deleted one's (CompareAndDelete leaves a tombstone). One that expired,
// or was deleted longer ago, starts again from the clock: if Redis's clock
// stepped back in between, a version could then repeat one the old value
// had, and a writer still holding that old version would not be stopped.
// Keep a value (rather than delete and re-create it) where that matters.
type Version int64

// Time returns when the write that made v happened, by the Redis clock
// (microsecond precision). For 0, no write, it returns the zero Time.
func (v Version) Time() time.Time {
	if v <= 0 {
		return time.Time{}
	}
	return time.UnixMicro(int64(v) / versionSeqs)
}

// Value is a versioned value as Load read it.
type Value struct {
	// Data is the value's bytes: empty, not nil, for a value written
	// with empty data; nil when the value does not exist.
	Data []byte
	// Version is the write that made Data, to pass to CompareAndSet or
	// CompareAndDelete; 0 when the value does not exist.
	Version Version
}

// Load reads the versioned value stored under key: its data and version, in
// one round trip. A value that does not exist (never written, deleted or
// expired) is Value{} and a nil error.
func (c *Client) Load(ctx context.Context, key string) (Value, error) {
	k, err := c.key(key, versionedSuffix)
	if err != nil {
		return Value{}, err
	}
	res, err := versionedLoadScript.Values(ctx, c.rdb, append(versionedLoadScript.Args(1, 1), k))
	if err != nil {
		return Value{}, fmt.Errorf("counter: %q: %w", key, asWrongType(err))
	}
	if len(res) != 2 {
		return Value{}, fmt.Errorf("counter: %q: unexpected reply %v", key, res)
	}
	data, dataOK := res[0].(string)
	ver, verOK := res[1].(string)
	switch {
	case res[0] == nil && res[1] == nil:
		return Value{}, nil
	case !dataOK || !verOK:
		return Value{}, fmt.Errorf("%w: counter: %q: %s is not a versioned value", ErrWrongType, key, k)
	}
	v, err := strconv.ParseInt(ver, 10, 64)
	if err != nil || v <= 0 {
		return Value{}, fmt.Errorf("counter: %q: %s has a malformed version %q", key, k, ver)
	}
	return Value{Data: []byte(data), Version: Version(v)}, nil
}

// CompareAndSet writes data as the value of key if its version is still
// expect, the version the caller loaded, and returns the new version. With
// expect 0 it writes only if the value does not exist: it creates it.
//
// If someone else wrote or deleted the value since (its version is not
// expect), nothing is written and the error wraps ErrConflict and names the
// current version: Load the value again, reapply the change and retry.
//
// go-redis sends a command again when its reply is lost (a broken
// connection, a read timeout; Options.MaxRetries), and the second run then
// finds this call's own write where it expects expect. Each write keeps a
// random token of its call (in a field Load never reads), so that run
// still reports the write, with the version the first run stamped: a
// caller who retries on ErrConflict does not apply its change twice. The
// exception: if another write landed between the two runs, the error is
// ErrConflict although this call's write landed (and was overwritten).
//
// ttl > 0 makes the value expire ttl after this write (rounded up to the
// millisecond); ttl 0 makes it never expire, removing an expiry an earlier
// write set, as SET does. Either way the expiry is set in the same script
// as the data, so a value never exists, even briefly, without the expiry
// the caller asked for. A negative ttl is an error wrapping ErrInvalid, as
// is an empty key or a negative expect; such calls never reach Redis. data
// may be empty: the value then still exists, with a version.
func (c *Client) CompareAndSet(ctx context.Context, key string, expect Version, data []byte, ttl time.Duration) (Version, error) {
	if expect < 0 {
		return 0, fmt.Errorf("%w: %q: negative version %d", ErrInvalid, key, expect)
	}
	if ttl < 0 {
		return 0, fmt.Errorf("%w: %q: negative ttl %v", ErrInvalid, key, ttl)
	}
	k, err := c.key(key, versionedSuffix)
	if err != nil {
		return 0, err
	}
	if data == nil {
		data = []byte{}
	}
	// Rounded up without adding first: ttl + 999,999 ns overflows for the
	// longest durations and would read as 0, no expiry.
	ttlMillis := ttl.Milliseconds()
	if ttl%time.Millisecond != 0 {
		ttlMillis++
	}
	tok := newToken()
	args := versionedSetScript.Args(1, 7)
	args = append(args, k, int64(expect)/versionSeqs, int64(expect)%versionSeqs, data, ttlMillis, c.versionNowArg(),
		hex.EncodeToString(tok[:]))
	res, err := versionedSetScript.Ints(ctx, c.rdb, args)
	if err != nil {
		return 0, fmt.Errorf("counter: %q: %w", key, asWrongType(err))
	}
	ok, cur, err := versionedReply(res)
	if err != nil {
		return 0, fmt.Errorf("counter: %q: %w", key, asWrongType(err))
	}
	if !ok {
		return 0, versionConflict(key, expect, cur)
	}
	return cur, nil
}

// CompareAndDelete deletes the value of key if its version is still expect,
// the version the caller loaded. If someone else wrote it since, nothing is
// deleted and the error wraps ErrConflict and names the current version.
//
// If the value no longer exists, the error wraps ErrNotExist (and not
// ErrConflict): it was deleted or expired. This call may have deleted it
// itself: go-redis sends a command again when its reply is lost
// (Options.MaxRetries), and the second run finds the value gone. Either
// way this call overruled no one's write, and most callers treat
// ErrNotExist as done. One exception: if another client creates the value
// anew between the two runs, the second run finds that new value and the
// error wraps ErrConflict, naming its version, though this call did
// delete the version it expected (a caller that must tell the two apart
// sets MaxRetries to -1).
//
// expect must be a version Load or CompareAndSet returned: 0 (or an empty
// key) is an error wrapping ErrInvalid, and never reaches Redis.
//
// The value's hash is not removed at once: for tombstoneTTL (five minutes)
// it stays without its data, and Load and every call here take it for a
// value that does not exist. Meanwhile a CompareAndSet that go-redis sends
// again, whose first run wrote the value deleted here, does not bring it
// back (it gets ErrConflict), and a value created anew gets a version past
// the deleted one's even if the Redis clock stepped back.
func (c *Client) CompareAndDelete(ctx context.Context, key string, expect Version) error {
	if expect <= 0 {
		return fmt.Errorf("%w: %q: version %d: CompareAndDelete needs the version of an existing value", ErrInvalid, key, expect)
	}
	k, err := c.key(key, versionedSuffix)
	if err != nil {
		return err
	}
	args := versionedDeleteScript.Args(1, 4)
	args = append(args, k, int64(expect)/versionSeqs, int64(expect)%versionSeqs, tombstoneTTL.Milliseconds())
	res, err := versionedDeleteScript.Ints(ctx, c.rdb, args)
	if err != nil {
		return fmt.Errorf("counter: %q: %w", key, asWrongType(err))
	}
	ok, cur, err := versionedReply(res)
	if err != nil {
		return fmt.Errorf("counter: %q: %w", key, asWrongType(err))
	}
	if !ok && cur == 0 {
		return fmt.Errorf("%w: %q: expected version %d; it was deleted (perhaps by this call: go-redis sends a call again when its reply is lost) or it expired",
			ErrNotExist, key, expect)
	}
	if !ok {
		return versionConflict(key, expect, cur)
	}
	return nil
}

// tombstoneTTL is how long a deleted value's tombstone lasts: well past
// the seconds in which go-redis sends a call again (versioned_delete.lua).
const tombstoneTTL = 5 * time.Minute

// versionedReply reads a versioned script's reply {ok, us, seq}.
func versionedReply(res []int64) (ok bool, v Version, err error) {
	if len(res) != 3 || res[0] < 0 || res[0] > 1 ||
		res[1] < 0 || res[1] > maxVersionMicros || res[2] < 0 || res[2] >= versionSeqs {
		return false, 0, fmt.Errorf("unexpected reply %v", res)
	}
	return res[0] == 1, Version(res[1]*versionSeqs + res[2]), nil
}

func versionConflict(key string, expect, cur Version) error {
	if cur == 0 {
		return fmt.Errorf("%w: %q: expected version %d, but the value does not exist", ErrConflict, key, expect)
	}
	return fmt.Errorf("%w: %q: expected version %d, current version is %d", ErrConflict, key, expect, cur)
}

// versionNowArg is the versioned scripts' "now": "" (the script reads Redis
// TIME) unless a test pinned the clock, then its Unix microseconds, kept
// within what a version can hold.
func (c *Client) versionNowArg() string {
	if c.clock == nil {
		return ""
	}
	us := c.clock().UnixMicro()
	us = max(0, min(us, maxVersionMicros))
	return strconv.FormatInt(us, 10)
}
