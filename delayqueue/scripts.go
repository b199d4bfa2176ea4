package delayqueue

import (
	_ "embed"

	"github.com/surgekit/surge/internal/script"
)

// common.lua holds the helpers every script uses; it is prepended to each.
//
//go:embed common.lua
var commonLua string

func newScript(src string) *script.Script { return script.New(commonLua + "\n" + src) }

var (
	//go:embed enqueue.lua
	enqueueLua    string
	enqueueScript = newScript(enqueueLua)

	//go:embed claim.lua
	claimLua    string
	claimScript = newScript(claimLua)

	//go:embed ack.lua
	ackLua    string
	ackScript = newScript(ackLua)

	//go:embed nack.lua
	nackLua    string
	nackScript = newScript(nackLua)

	//go:embed extend.lua
	extendLua    string
	extendScript = newScript(extendLua)

	//go:embed cancel.lua
	cancelLua    string
	cancelScript = newScript(cancelLua)

	//go:embed reschedule.lua
	rescheduleLua    string
	rescheduleScript = newScript(rescheduleLua)

	//go:embed revive.lua
	reviveLua    string
	reviveScript = newScript(reviveLua)

	//go:embed dead.lua
	deadLua    string
	deadScript = newScript(deadLua)

	//go:embed stats.lua
	statsLua    string
	statsScript = newScript(statsLua)

	//go:embed position.lua
	positionLua    string
	positionScript = newScript(positionLua)

	//go:embed periodic.lua
	periodicLua    string
	periodicScript = newScript(periodicLua)
)
