package hashtag

import (
	"context"
	"strconv"
	"testing"

	"github.com/surgekit/surge/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestSlotMatchesTheCluster(t *testing.T) {
	rdb := redistest.Open(t, redistest.ClusterB).Client(t)
	keys := []string{"", "a", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "surge:stock:{sku#3.17}:due", "ünïcode{ß}"}
	// Every byte value, so that each entry of the CRC table is read.
	for b := range 256 {
		keys = append(keys, "k"+string([]byte{byte(b), byte(255 - b)})+strconv.Itoa(b*7919))
	}
	for _, key := range keys {
		want, err := rdb.ClusterKeySlot(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(key); int64(got) != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}
}

func TestSameTag(t *testing.T) {
	// A pair of different tags in one slot, found by search: a cluster
	// would take them together, a Ring would not.
	var a, b string
	seen := map[int]string{}
	for i := 0; a == ""; i++ {
		k := "k" + strconv.Itoa(i)
		if prev, ok := seen[Slot(k)]; ok {
			a, b = prev, k
		}
		seen[Slot(k)] = k
	}
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"x{user:1}:draws", "y{user:1}:wins", true},
		{"{user:1}", "user:1", true},
		{a, b, false},
		{"{" + a + "}:1", "{" + b + "}:2", false},
		{"{" + a + "}:1", "{" + a + "}:2", true},
		{"foo", "bar", false},           // slots 12182 and 5061
		{"x{foo}", "bar{}{foo}", false}, // an empty {} is no tag: the whole key
		{"{foo}:draws", "{bar}:wins", false},
	} {
		if got := SameTag(c.a, c.b); got != c.want {
			t.Errorf("SameTag(%q, %q) = %v, want %v (slots %d and %d)", c.a, c.b, got, c.want, Slot(c.a), Slot(c.b))
		}
	}
}

// slot is the part of a key Redis Cluster hashes.
func slot(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j == i+1 {
						return key
					}
					return key[i+1 : j]
				}
			}
			return key
		}
	}
	return key
}

func TestKeysOfOneNameShareTheirHashTag(t *testing.T) {
	for _, name := range []string{"order:42", "a}b", "x{y", "{already}", "ünïcode"} {
		if err := CheckName(name); err != nil {
			t.Fatalf("CheckName(%q): %v", name, err)
		}
		a, b := Key("app:", name, ""), Key("app:", name, ":fence")
		if slot(a) != slot(b) {
			t.Errorf("name %q: %q hashes %q, %q hashes %q", name, a, slot(a), b, slot(b))
		}
	}
}

func TestBadNamesAndPrefixes(t *testing.T) {
	for _, name := range []string{"", "}x"} {
		if CheckName(name) == nil {
			t.Errorf("CheckName(%q) accepted", name)
		}
	}
	for _, p := range []string{"a{", "}b", "{}"} {
		if CheckPrefix(p) == nil {
			t.Errorf("CheckPrefix(%q) accepted", p)
		}
	}
	if err := CheckPrefix(""); err != nil {
		t.Errorf("empty prefix: %v", err)
	}
}

func TestTaggedKeepsAKeysOwnTagAndWrapsAnyOther(t *testing.T) {
	for _, c := range []struct{ key, want string }{
		{"user:42", "p:{user:42}:s"},
		{"{user:42}:draws", "p:{user:42}:draws:s"},
		{"x{u}y", "p:x{u}y:s"},
	} {
		got, err := Tagged("p:", c.key, ":s")
		if err != nil || got != c.want {
			t.Errorf("Tagged(%q) = %q, %v; want %q", c.key, got, err, c.want)
		}
	}
	// Keys that share a tag share a slot, whatever else they say.
	a, _ := Tagged("p:", "{user:42}:draws", "")
	b, _ := Tagged("p:", "{user:42}:wins", ":x")
	if Slot(a) != Slot(b) {
		t.Errorf("%q and %q hash apart", a, b)
	}
	for _, key := range []string{"", "a{b", "a{}b", "}x"} {
		if _, err := Tagged("p:", key, ""); err == nil {
			t.Errorf("Tagged(%q) accepted", key)
		}
	}
}

func TestTagSlotIsTheSlotOfTaggedKeys(t *testing.T) {
	for _, tag := range []string{"a", "item#3.17", "user:1000"} {
		if got, want := TagSlot([]byte(tag)), Slot("p:{"+tag+"}:x"); got != want {
			t.Errorf("TagSlot(%q) = %d, Slot = %d", tag, got, want)
		}
	}
}
