// Package hashtag builds the Redis keys of surge's primitives so that every
// key one object owns lands in the same Redis Cluster slot.
//
// A key is prefix + "{" + name + "}" + suffix. Redis Cluster hashes only the
// part between the first "{" and the next "}", so all of an object's keys
// share the slot of its name whatever their suffix.
package hashtag

import (
	"errors"
	"fmt"
	"strings"
)

// Key returns prefix{name}suffix.
func Key(prefix, name, suffix string) string {
	return prefix + "{" + name + "}" + suffix
}

// CheckPrefix reports why prefix cannot start surge keys, or nil. A brace in
// the prefix would become the hash tag and split an object's keys across
// slots.
func CheckPrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return errors.New("prefix must not contain '{' or '}'")
	}
	return nil
}

// CheckName reports why name cannot name an object, or nil. A name that
// starts with "}" would leave an empty tag, which Redis ignores, so the
// object's keys would hash apart.
func CheckName(name string) error {
	switch {
	case name == "":
		return errors.New("name must not be empty")
	case name[0] == '}':
		return errors.New("name must not start with '}'")
	}
	return nil
}

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// Slot returns the Redis Cluster slot of key: CRC16 (XMODEM) of its hash
// tag, or of the whole key when it has no non-empty tag, modulo Slots.
func Slot(key string) int { return crc16(hashed(key)) % Slots }

// SameTag reports whether keys a and b hash by the same tag (or, without
// a tag, are the same key). That is what a multi-key script needs on every
// client: a cluster places keys by slot, which keys of one tag share, but
// a *redis.Ring places them by tag, so two tags that happen to share a
// slot can still land on two shards.
func SameTag(a, b string) bool { return hashed(a) == hashed(b) }

// hashed returns the part of key that Redis Cluster hashes: its first
// non-empty {tag}, else the whole key.
func hashed(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// crcTable holds the CRC16 (XMODEM) of every byte: a byte at a time, the
// CRC costs a table read instead of eight shifts and branches (Slot runs
// on every multi-key call).
var crcTable = func() (t [256]uint16) {
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}()

// TagSlot returns the slot of every key whose hash tag is tag: Slot of
// "{" + tag + "}", without building that string (a search for tags with
// wanted slots tries thousands).
func TagSlot(tag []byte) int { return crc16(tag) % Slots }

func crc16[T string | []byte](s T) int {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return int(crc)
}

// OwnTag reports whether key carries its own non-empty hash tag ({...}),
// which then decides its slot; a key without one is meant to become its own
// tag. A key with a '{' but no non-empty tag after it is an error: it would
// hash whole, apart from whatever the caller meant to group it with. So is
// a key without a '{' that starts with '}': wrapped in braces it would
// leave an empty tag, and its keys would hash apart.
func OwnTag(key string) (bool, error) {
	if key == "" {
		return false, errors.New("empty key")
	}
	i := strings.IndexByte(key, '{')
	if i < 0 {
		if key[0] == '}' {
			return false, fmt.Errorf("key %q starts with '}', which would leave it an empty {tag}", key)
		}
		return false, nil
	}
	if j := strings.IndexByte(key[i+1:], '}'); j <= 0 {
		return false, fmt.Errorf("key %q has a '{' but no non-empty {tag}", key)
	}
	return true, nil
}

// Tagged returns prefix + key + suffix with key wrapped in braces, unless
// it carries its own hash tag (OwnTag).
func Tagged(prefix, key, suffix string) (string, error) {
	own, err := OwnTag(key)
	if err != nil {
		return "", err
	}
	if own {
		return prefix + key + suffix, nil
	}
	return Key(prefix, key, suffix), nil
}
