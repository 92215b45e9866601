//go:build linux

package proc

// SwapBootID makes f the boot id reader (nil keeps the current one) and
// returns the one it replaces: a test injects a race inside Check through
// it (Check reads the boot id after Kill has opened its pidfd, before it
// reads the process's start time).
func SwapBootID(f func() (string, error)) func() (string, error) {
	old := bootID
	if f != nil {
		bootID = f
	}
	return old
}
