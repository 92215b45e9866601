package logs

import "fmt"

// Nomad's defaults for a task's logs block.
const (
	DefaultMaxFiles      = 10 // max_files
	DefaultMaxFileSizeMB = 10 // max_file_size, in MB
)

// MB is the unit of max_file_size, as in Nomad: 1 MB = 1 MiB.
const MB = 1 << 20

// Config is a task's logs block, with Nomad's names and units. Start from
// DefaultConfig and decode the block over it, so that an attribute the
// block leaves out keeps Nomad's default and an explicit 0 is refused by
// Validate.
type Config struct {
	// MaxFiles is how many files of a stream are kept, the live file
	// included; the oldest rotated file beyond it is deleted.
	MaxFiles int `hcl:"max_files,optional" json:"max_files"`
	// MaxFileSizeMB is the size, in MB, at which the live file is rotated.
	MaxFileSizeMB int `hcl:"max_file_size,optional" json:"max_file_size"`
	// Disabled discards the task's output: nothing is written.
	Disabled bool `hcl:"disabled,optional" json:"disabled"`
}

// DefaultConfig returns Nomad's defaults: 10 files of 10 MB.
func DefaultConfig() Config {
	return Config{MaxFiles: DefaultMaxFiles, MaxFileSizeMB: DefaultMaxFileSizeMB}
}

// Validate reports a config that cannot be used, naming the attribute and
// what it must be. A disabled config is valid whatever its sizes.
func (c Config) Validate() error {
	if c.Disabled {
		return nil
	}
	if c.MaxFiles < 1 {
		return fmt.Errorf("%w: max_files = %d: it counts the live file, so it must be at least 1 (Nomad's default is %d)",
			ErrInvalidConfig, c.MaxFiles, DefaultMaxFiles)
	}
	if c.MaxFileSizeMB < 1 {
		return fmt.Errorf("%w: max_file_size = %d: it is in MB and must be at least 1 (Nomad's default is %d)",
			ErrInvalidConfig, c.MaxFileSizeMB, DefaultMaxFileSizeMB)
	}
	const maxMB = 1 << 20 // 1 TiB per file: beyond that it is a typo
	if c.MaxFileSizeMB > maxMB {
		return fmt.Errorf("%w: max_file_size = %d MB is more than %d MB (1 TiB); give the size in MB",
			ErrInvalidConfig, c.MaxFileSizeMB, maxMB)
	}
	return nil
}

// maxFileSize is MaxFileSizeMB in bytes.
func (c Config) maxFileSize() int64 { return int64(c.MaxFileSizeMB) * MB }
