//go:build linux

package wire

// The executor's crash points.
const (
	CrashBeforeRestartIntent = "executor:before-journal:restart-intent"
	CrashAfterRestartIntent  = "executor:after-journal:restart-intent"
	CrashAfterRelaunch       = "executor:after-relaunch"
)

// CrashPoints lists the executor's crash points.
func CrashPoints() []string {
	return []string{CrashBeforeRestartIntent, CrashAfterRestartIntent, CrashAfterRelaunch}
}
