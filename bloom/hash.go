package bloom

import "math/bits"

// An item's bit positions come from MurmurHash3 x64 128 (Austin Appleby's
// public-domain hash, implemented here from its specification): it mixes
// every input bit into both 64-bit halves, which double hashing needs, and
// it is fast on the short ids filters hold. Changing anything in this file
// changes where items live: it is version 1 of the hashing, recorded in
// every filter's stored parameters (hashVersion) so that a filter written
// by one version is never read by another.

const (
	murmurC1 = 0x87c37b91114253d5
	murmurC2 = 0x4cf5ad432745937f

	// positionSeed seeds the hash whose halves give the bit positions;
	// shardSeed seeds an independent hash that picks the shard, so that
	// which shard an item lands in says nothing about where its bits are.
	positionSeed = 0
	shardSeed    = 0x5eed5eed
)

// murmur3 returns the 128-bit MurmurHash3 (x64 variant) of s with seed,
// as its two 64-bit halves.
func murmur3(s string, seed uint32) (h1, h2 uint64) {
	h1, h2 = uint64(seed), uint64(seed)
	n := len(s)
	for len(s) >= 16 {
		k1 := le64(s)
		k2 := le64(s[8:])
		s = s[16:]

		h1 ^= mixK1(k1)
		h1 = bits.RotateLeft64(h1, 27) + h2
		h1 = h1*5 + 0x52dce729

		h2 ^= mixK2(k2)
		h2 = bits.RotateLeft64(h2, 31) + h1
		h2 = h2*5 + 0x38495ab5
	}
	// The tail: up to 15 bytes, little-endian, low 8 into k1.
	var k1, k2 uint64
	for i := len(s) - 1; i >= 8; i-- {
		k2 = k2<<8 | uint64(s[i])
	}
	if len(s) > 8 {
		h2 ^= mixK2(k2)
	}
	for i := min(len(s), 8) - 1; i >= 0; i-- {
		k1 = k1<<8 | uint64(s[i])
	}
	if len(s) > 0 {
		h1 ^= mixK1(k1)
	}

	h1 ^= uint64(n)
	h2 ^= uint64(n)
	h1 += h2
	h2 += h1
	h1 = fmix64(h1)
	h2 = fmix64(h2)
	h1 += h2
	h2 += h1
	return h1, h2
}

// le64 reads s's first eight bytes as a little-endian integer (the
// compiler turns the pattern into one load).
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func mixK1(k uint64) uint64 {
	k *= murmurC1
	k = bits.RotateLeft64(k, 31)
	return k * murmurC2
}

func mixK2(k uint64) uint64 {
	k *= murmurC2
	k = bits.RotateLeft64(k, 33)
	return k * murmurC1
}

func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// shardOf returns the shard, of shards, that holds item: the high bits of
// an independently seeded hash times shards (Lemire's multiply-shift
// reduction, unbiased enough for any shard count and free of a division).
func shardOf(item string, shards int) int {
	if shards == 1 {
		return 0
	}
	h, _ := murmur3(item, shardSeed)
	hi, _ := bits.Mul64(h, uint64(shards))
	return int(hi)
}

// appendPositions appends the k bit positions, each below m, of the item
// whose position hash is (h1, h2): enhanced double hashing (Dillinger and
// Manolios, 2004), here in the form y += i, then x += y, all mod m, so
// that x_i = h1 + i·h2 + (i³ + 3i² + 2i)/6. Plain double hashing
// (h1 + i·h2) gives k copies of one position when h2 is a multiple of m
// and clusters them when h2 is small; the cubic term breaks both
// patterns, and the positions behave like k independent hashes in the
// false-positive rate (Kirsch and Mitzenmacher, 2006). m is at most 2^32,
// so no sum below overflows.
func appendPositions(dst []int64, h1, h2 uint64, m uint64, k int) []int64 {
	x, y := h1%m, h2%m
	dst = append(dst, int64(x))
	for i := uint64(1); i < uint64(k); i++ {
		y = (y + i) % m
		x += y
		if x >= m {
			x -= m
		}
		dst = append(dst, int64(x))
	}
	return dst
}
