package bloom

import "math/bits"

// An item's bit positions come from MurmurHash3 x64 128 (Austin Appleby's
// public-domain hash, implemented here from its specification): it mixes
// every input bit into both 64-bit halves, which the position scheme needs, and
// it is fast on the short ids filters hold. Changing anything in this file
// changes where items live: it is version 2 of the hashing (version 1 was
// plain enhanced double hashing mod m, see appendPositions), recorded in
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

// mersenne61 is the prime 2^61 - 1, the modulus of the position
// arithmetic (see appendPositions).
const mersenne61 = 1<<61 - 1

// appendPositions appends the k bit positions, each below m, of the item
// whose position hash is (h1, h2). It is triple hashing (Dillinger and
// Manolios, 2004) with their enhanced cubic term:
//
//	x_i = a + i·b + c·i(i+1)/2 + (i³+3i²+2i)/6  (mod P),  position_i = x_i mod m
//
// where a and b are h1 and h2 and c is a third value mixed from both, all
// mod the prime P = 2^61 - 1, computed as y += c + i, then x += y.
//
// Why not the textbook h1 + i·h2 mod m: its positions depend on (h1 mod m,
// h2 mod m) alone, so each pair of items shares all k positions with
// chance 1/m², and a stranger matches an added item outright at a rate
// near n/m². That floor is invisible in a large filter at 1%, but it is
// the whole error of a small or tight one: in layers of 8 items at 5e-7
// (m = 242 bits), one run in ten of 200 concurrent Adds saw a fresh item
// reported present, and 100,000 items at 1e-9 would land near 5e-9.
// Working mod P leaves P² ≈ 2^122 pairs; the c term breaks the
// near-periodic runs that wrapping mod P alone leaves in tiny bitmaps
// (several times the rate in trials, where this form matches k
// independent hashes; TestSmallFiltersKeepTheirRate). m is at most 2^32,
// so the final reduction's bias is below 2^-29, and no sum overflows.
func appendPositions(dst []int64, h1, h2 uint64, m uint64, k int) []int64 {
	x, y := h1%mersenne61, h2%mersenne61
	c := fmix64(h1^bits.RotateLeft64(h2, 32)) % mersenne61
	dst = append(dst, int64(x%m))
	for i := uint64(1); i < uint64(k); i++ {
		y += c
		if y >= mersenne61 {
			y -= mersenne61
		}
		y += i
		if y >= mersenne61 {
			y -= mersenne61
		}
		x += y
		if x >= mersenne61 {
			x -= mersenne61
		}
		dst = append(dst, int64(x%m))
	}
	return dst
}
