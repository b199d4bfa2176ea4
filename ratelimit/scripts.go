package ratelimit

import (
	_ "embed"
	"strings"

	"github.com/surgekit/surge/internal/script"
)

// Every decision script is common.lua (arguments, clock, integer
// division), then the algorithms it uses, then its own part. A script
// carries only the algorithms it needs: defining a Lua function creates a
// closure on every call, and on a busy server each costs measurable time.
// gcra_all.lua (any set of GCRA limits) and fixed_one.lua (a single fixed
// window), the hot paths, go further and stand alone.
var (
	//go:embed common.lua
	commonLua string
	//go:embed gcra.lua
	gcraLua string
	//go:embed fixed.lua
	fixedLua string
	//go:embed sliding.lua
	slidingLua string

	//go:embed allow.lua
	allowLua string
	//go:embed gcra_all.lua
	gcraAllLua string
	//go:embed fixed_one.lua
	fixedOneLua string

	allowScript    = decisionScript(gcraLua, fixedLua, slidingLua, allowLua)
	gcraAllScript  = script.New(gcraAllLua)
	fixedOneScript = script.New(fixedOneLua)
)

func decisionScript(parts ...string) *script.Script {
	return script.New(commonLua + "\n" + strings.Join(parts, "\n"))
}
