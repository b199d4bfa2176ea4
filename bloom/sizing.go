package bloom

import (
	"fmt"
	"math"
	"strconv"
)

const (
	// MaxShardBits is the most bits one shard's bitmap may have: Redis
	// refuses SETBIT offsets at or above 2^32 (a 512 MB string).
	MaxShardBits = 1 << 32

	// MaxShards is the most shards a filter may have.
	MaxShards = 1024

	// MaxLayers is the most layers a shard of a scalable filter may grow.
	MaxLayers = 32

	// hashVersion names how items become bit positions (hash.go). It is
	// part of every stored parameter string.
	hashVersion = "murmur3-x64-128/triple61/2"

	// tightening is the factor by which each layer of a scalable filter
	// lowers its false-positive rate: layers at p/2, p/4, p/8, ... sum to
	// less than p however many there are.
	tightening = 0.5
)

// Params describes a filter: what it was sized for and the geometry that
// follows. A scalable filter's Bits and Hashes are those of its first
// layer; each later layer is Growth times larger, with a rate half the
// previous layer's.
type Params struct {
	// Capacity is the number of items the filter (the first layer, if
	// scalable) is sized for.
	Capacity int64
	// Rate is the target false-positive rate at Capacity items.
	Rate float64
	// Bits is m, the bits over all shards.
	Bits uint64
	// Hashes is k, the bits an item sets.
	Hashes int
	// Shards is the number of bitmaps items are spread over, each on its
	// own hash tag.
	Shards int
	// Growth is the factor by which each new layer of a scalable filter
	// is larger than the last; 0 for a fixed filter.
	Growth int
	// Hash names the hash function and position scheme, with its version.
	Hash string
}

// ExpectedRate returns the false-positive rate theory predicts for a fixed
// filter with these parameters after items distinct adds:
// (1 - e^(-k·items/m))^k. Shards add a little to it, since their loads
// vary around items/Shards.
func (p Params) ExpectedRate(items int64) float64 {
	return math.Pow(-math.Expm1(-float64(p.Hashes)*float64(items)/float64(p.Bits)), float64(p.Hashes))
}

// String returns the parameter string every shard stores and every script
// checks.
func (p Params) String() string {
	if p.Growth == 0 {
		return fmt.Sprintf("bloom %s m=%d k=%d shards=%d", p.Hash, p.Bits, p.Hashes, p.Shards)
	}
	return fmt.Sprintf("bloom %s scalable n=%d p=%s growth=%d shards=%d",
		p.Hash, p.Capacity, strconv.FormatFloat(p.Rate, 'g', -1, 64), p.Growth, p.Shards)
}

// layer is the geometry of one layer of one shard.
type layer struct {
	capacity int64  // items the layer holds before the next one opens
	bits     uint64 // m of the layer's bitmap
	hashes   int    // k
}

// optimalBits is m = -n·ln(p) / (ln 2)^2, the size that minimises the
// false-positive rate p for n items with the best k.
func optimalBits(n, p float64) float64 {
	return math.Ceil(-n * math.Log(p) / (math.Ln2 * math.Ln2))
}

// optimalHashes is k = (m/n)·ln 2, rounded, at least 1.
func optimalHashes(m, n float64) int {
	return max(1, int(math.Round(m/n*math.Ln2)))
}

// plan checks the arguments of New or NewScalable and works out the
// filter's parameters and per-shard layers.
func plan(capacity int64, rate float64, cfg config, scalable bool) (Params, []layer, error) {
	if capacity < 1 {
		return Params{}, nil, fmt.Errorf("%w: capacity %d, want at least 1", ErrInvalid, capacity)
	}
	if !(rate > 0 && rate < 1) {
		return Params{}, nil, fmt.Errorf("%w: false-positive rate %v, want between 0 and 1", ErrInvalid, rate)
	}
	if !scalable && cfg.growth != 0 {
		return Params{}, nil, fmt.Errorf("%w: growth applies to scalable filters only", ErrInvalid)
	}
	n := float64(capacity)
	firstRate := rate
	if scalable {
		firstRate = rate * tightening
	}
	total := optimalBits(n, firstRate)
	const maxBits = float64(MaxShards) * MaxShardBits
	if total > maxBits {
		return Params{}, nil, fmt.Errorf("%w: %d items at rate %v need %.0f bits, more than %d shards of 2^32 can hold",
			ErrInvalid, capacity, rate, total, MaxShards)
	}
	shards := cfg.shards
	if shards == 0 {
		shards = int(math.Ceil(total / MaxShardBits))
	}
	if perShard := math.Ceil(total / float64(shards)); perShard > MaxShardBits {
		return Params{}, nil, fmt.Errorf("%w: %d shards of %.0f bits each; a shard holds at most 2^32 bits, so use at least %d",
			ErrInvalid, shards, perShard, int(math.Ceil(total/MaxShardBits)))
	}

	p := Params{Capacity: capacity, Rate: rate, Shards: shards, Hash: hashVersion}
	if !scalable {
		bits := uint64(math.Ceil(total / float64(shards)))
		p.Bits = bits * uint64(shards)
		p.Hashes = optimalHashes(total, n)
		return p, []layer{{capacity: ceilDiv(capacity, shards), bits: bits, hashes: p.Hashes}}, nil
	}

	p.Growth = cfg.growth
	if p.Growth == 0 {
		p.Growth = DefaultGrowth
	}
	layers := scalableLayers(ceilDiv(capacity, shards), rate, p.Growth)
	if len(layers) == 0 {
		return Params{}, nil, fmt.Errorf("%w: the first layer of %d shards exceeds 2^32 bits a shard; use more shards", ErrInvalid, shards)
	}
	p.Bits = layers[0].bits * uint64(shards)
	p.Hashes = layers[0].hashes
	return p, layers, nil
}

// scalableLayers returns the layers one shard of a scalable filter may
// grow: layer j holds capacity·growth^j items at rate·tightening^(j+1),
// while it fits in MaxShardBits and MaxLayers.
func scalableLayers(capacity int64, rate float64, growth int) []layer {
	var layers []layer
	c, p := float64(capacity), rate
	for range MaxLayers {
		p *= tightening
		bits := optimalBits(c, p)
		if bits > MaxShardBits || c > math.MaxInt64/float64(growth) {
			break
		}
		layers = append(layers, layer{capacity: int64(c), bits: uint64(bits), hashes: optimalHashes(bits, c)})
		c *= float64(growth)
	}
	return layers
}

func ceilDiv(n int64, d int) int64 { return (n + int64(d) - 1) / int64(d) }
