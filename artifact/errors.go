package artifact

import "errors"

// Errors returned by Fetch and Unpack; Fetch wraps each in an *Error
// naming the artifact's source.
var (
	// ErrSource is returned for a source tether cannot fetch: a getter it
	// does not have (git::, hg::, s3::, gcs::, the github.com shorthand), a
	// URL that does not parse, or a host that cannot be reached or answers
	// with an error.
	ErrSource = errors.New("artifact: cannot fetch the source")
	// ErrChecksum is returned when the fetched bytes do not match the
	// checksum option, or the option is malformed.
	ErrChecksum = errors.New("artifact: checksum mismatch")
	// ErrOutside is returned for a destination, a local source or an
	// archive entry outside the directories it may reach: nothing is
	// written outside.
	ErrOutside = errors.New("artifact: path outside the allowed directories")
	// ErrArchive is returned for an archive that cannot be unpacked: a
	// corrupt one, or an entry tether refuses (a device node, a link out,
	// too many files, too many bytes).
	ErrArchive = errors.New("artifact: bad archive")
	// ErrMode is returned when the artifact's mode does not fit what the
	// source holds (mode "file" for a directory or a tar archive, mode
	// "dir" for a plain file).
	ErrMode = errors.New("artifact: mode does not fit the source")
)

// Error is a failed fetch: it names the artifact's source.
type Error struct {
	Source string
	Err    error
}

func (e *Error) Error() string { return "artifact " + quote(e.Source) + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// definite is a failure that no second try can mend: the artifact block
// itself is wrong (a getter tether does not have, a source or a checksum
// option that does not parse), whatever the network does.
type definite struct{ error }

func (d definite) Unwrap() error { return d.error }

// Retryable reports whether a failed fetch may succeed if tried again (a
// host that could not be reached, an answer cut short), rather than fail
// the same way for ever (the artifact block is wrong: Retryable is false).
func Retryable(err error) bool {
	var d definite
	return !errors.As(err, &d)
}
