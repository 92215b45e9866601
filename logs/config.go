package logs

import "github.com/tether-fsm/tether/fsm"

// Nomad's defaults for a task's logs block.
const (
	DefaultMaxFiles      = fsm.DefaultLogMaxFiles      // max_files
	DefaultMaxFileSizeMB = fsm.DefaultLogMaxFileSizeMB // max_file_size, in MB
)

// MB is the unit of max_file_size, as in Nomad: 1 MB = 1 MiB.
const MB = 1 << 20

// Config is a task's logs block: fsm.LogConfig itself (one type for the
// task file, the log, the executor and the writer). Validate refuses one
// that cannot be used; WithDefaults fills Nomad's defaults.
type Config = fsm.LogConfig

// DefaultConfig returns Nomad's defaults: 10 files of 10 MB.
func DefaultConfig() Config { return Config{}.WithDefaults() }

// maxFileSize is c's MaxFileSizeMB in bytes.
func maxFileSize(c Config) int64 { return int64(c.MaxFileSizeMB) * MB }
