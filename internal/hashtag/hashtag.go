// Package hashtag builds the Redis keys of surge's primitives so that every
// key one object owns lands in the same Redis Cluster slot.
//
// A key is prefix + "{" + name + "}" + suffix. Redis Cluster hashes only the
// part between the first "{" and the next "}", so all of an object's keys
// share the slot of its name whatever their suffix.
package hashtag

import (
	"errors"
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
