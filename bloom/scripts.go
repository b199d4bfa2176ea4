package bloom

import (
	_ "embed"

	"github.com/surgekit/surge/internal/script"
)

// common.lua is prepended to every script.
//
//go:embed common.lua
var commonLua string

func withMeta(src string) *script.Script { return script.New(commonLua + "\n" + src) }

var (
	//go:embed add.lua
	addLua    string
	addScript = withMeta(addLua)

	//go:embed exists.lua
	existsLua    string
	existsScript = withMeta(existsLua)

	//go:embed create.lua
	createLua    string
	createScript = withMeta(createLua)

	//go:embed info.lua
	infoLua    string
	infoScript = withMeta(infoLua)

	//go:embed drop.lua
	dropLua    string
	dropScript = withMeta(dropLua)
)

// The scripts of fixed-size filters stand alone: they check the parameter
// string themselves and never look at layers.
var (
	//go:embed add_fixed.lua
	addFixedLua    string
	addFixedScript = script.New(addFixedLua)

	//go:embed exists_fixed.lua
	existsFixedLua    string
	existsFixedScript = script.New(existsFixedLua)
)
