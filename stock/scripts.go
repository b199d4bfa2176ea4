package stock

import (
	_ "embed"

	"github.com/surgekit/surge/internal/script"
)

// records.lua holds the helpers every script uses; it is prepended to each.
//
//go:embed records.lua
var recordsLua string

func newScript(src string) *script.Script { return script.New(recordsLua + "\n" + src) }

var (
	//go:embed reserve.lua
	reserveLua    string
	reserveScript = newScript(reserveLua)

	//go:embed take.lua
	takeLua    string
	takeScript = newScript(takeLua)

	//go:embed settle.lua
	settleLua    string
	settleScript = newScript(settleLua)

	//go:embed confirm.lua
	confirmLua    string
	confirmScript = newScript(confirmLua)

	//go:embed cancel.lua
	cancelLua    string
	cancelScript = newScript(cancelLua)

	//go:embed mirror.lua
	mirrorLua    string
	mirrorScript = newScript(mirrorLua)

	//go:embed sweep.lua
	sweepLua    string
	sweepScript = newScript(sweepLua)

	//go:embed audit.lua
	auditLua    string
	auditScript = newScript(auditLua)

	//go:embed create.lua
	createLua    string
	createScript = newScript(createLua)

	//go:embed buckets.lua
	bucketsLua    string
	bucketsScript = newScript(bucketsLua)

	//go:embed restock.lua
	restockLua    string
	restockScript = newScript(restockLua)
)

// Reply codes shared by the scripts (see each script's header).
const (
	codeReserved     = 1
	codeReplayed     = 2
	codeEmpty        = -1
	codeBuyerLimit   = -2
	codeOrderTaken   = -3
	codePending      = -4
	codeClaimed      = -5
	codeReroute      = -6
	codeUnknownItem  = -7
	codeClaimOver    = -8
	codeUnknownOrder = -9
	codeElsewhere    = -10
	codeReturned     = -11
	codeSold         = -12
	codeTooMany      = -13
	codeTakenOver    = -14
)
