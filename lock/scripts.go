package lock

import (
	_ "embed"

	"github.com/surgekit/surge/internal/script"
)

var (
	//go:embed acquire.lua
	acquireLua    string
	acquireScript = script.New(acquireLua)

	//go:embed release.lua
	releaseLua    string
	releaseScript = script.New(releaseLua)

	//go:embed extend.lua
	extendLua    string
	extendScript = script.New(extendLua)

	//go:embed pttl.lua
	pttlLua    string
	pttlScript = script.New(pttlLua)
)
