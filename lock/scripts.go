package lock

import (
	_ "embed"

	"github.com/surgekit/surge/internal/script"
)

// fence.lua (and sem_common.lua, for Redis's clock in milliseconds) is
// prepended to the scripts that hand out a lock.
//
//go:embed fence.lua
var fenceLua string

func withFence(src string) *script.Script {
	return script.New(fenceLua + "\n" + semCommonLua + "\n" + src)
}

var (
	// Every call of a script defines its functions afresh, so the plain
	// lock's, the hottest, leaves out sem_common.lua's, which it never
	// calls.
	//
	//go:embed acquire.lua
	acquireLua    string
	acquireScript = script.New(fenceLua + "\n" + acquireLua)

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

// sem_common.lua is prepended to the semaphore scripts.
//
//go:embed sem_common.lua
var semCommonLua string

func semScript(src string) *script.Script { return script.New(semCommonLua + "\n" + src) }

var (
	//go:embed sem_acquire.lua
	semAcquireLua    string
	semAcquireScript = semScript(semAcquireLua)

	//go:embed sem_release.lua
	semReleaseLua    string
	semReleaseScript = semScript(semReleaseLua)

	//go:embed sem_extend.lua
	semExtendLua    string
	semExtendScript = semScript(semExtendLua)

	//go:embed sem_ttl.lua
	semTTLLua    string
	semTTLScript = semScript(semTTLLua)

	//go:embed sem_limit.lua
	semLimitLua    string
	semLimitScript = script.New(semLimitLua)
)

// fair_common.lua is prepended (after withFence's) to the fair lock's
// scripts that hand the lock out.
//
//go:embed fair_common.lua
var fairCommonLua string

func fairScript(src string) *script.Script { return withFence(fairCommonLua + "\n" + src) }

var (
	//go:embed fair_acquire.lua
	fairAcquireLua    string
	fairAcquireScript = fairScript(fairAcquireLua)

	//go:embed fair_leave.lua
	fairLeaveLua    string
	fairLeaveScript = script.New(fairLeaveLua)

	//go:embed fair_release.lua
	fairReleaseLua    string
	fairReleaseScript = fairScript(fairReleaseLua)
)

var (
	//go:embed rw_read.lua
	rwReadLua    string
	rwReadScript = withFence(rwReadLua)

	//go:embed rw_write.lua
	rwWriteLua    string
	rwWriteScript = withFence(rwWriteLua)

	//go:embed rw_read_release.lua
	rwReadReleaseLua    string
	rwReadReleaseScript = semScript(rwReadReleaseLua)
)
