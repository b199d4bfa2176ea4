package counter

import (
	_ "embed"

	"github.com/surgekit/surge/internal/script"
)

// period.lua is prepended to the scripts that count in windows.
//
//go:embed period.lua
var periodLua string

func windowed(src string) *script.Script { return script.New(periodLua + "\n" + src) }

// versioned_common.lua is prepended to the versioned-value scripts.
//
//go:embed versioned_common.lua
var versionedCommonLua string

func versioned(src string) *script.Script { return script.New(versionedCommonLua + "\n" + src) }

var (
	//go:embed take_one.lua
	takeOneLua    string
	takeOneScript = windowed(takeOneLua)

	//go:embed take_batch.lua
	takeBatchLua    string
	takeBatchScript = windowed(takeBatchLua)

	//go:embed get.lua
	getLua    string
	getScript = windowed(getLua)

	//go:embed versioned_load.lua
	versionedLoadLua    string
	versionedLoadScript = script.New(versionedLoadLua)

	//go:embed versioned_set.lua
	versionedSetLua    string
	versionedSetScript = versioned(versionedSetLua)

	//go:embed versioned_delete.lua
	versionedDeleteLua    string
	versionedDeleteScript = versioned(versionedDeleteLua)

	//go:embed unique_add.lua
	uniqueAddLua    string
	uniqueAddScript = windowed(uniqueAddLua)

	//go:embed unique_count.lua
	uniqueCountLua    string
	uniqueCountScript = windowed(uniqueCountLua)

	//go:embed calendar_mark.lua
	calendarMarkLua    string
	calendarMarkScript = script.New(calendarMarkLua)

	//go:embed calendar_read.lua
	calendarReadLua    string
	calendarReadScript = script.New(calendarReadLua)
)
