//go:build linux

package wire

// The executor's crash points.
const (
	CrashBeforeRestartIntent = "executor:before-journal:restart-intent"
	CrashAfterRestartIntent  = "executor:after-journal:restart-intent"
	CrashAfterRelaunch       = "executor:after-relaunch"
)

// The executor's crash points on its readiness path: before and after it
// journals a run's ready entry (before anything is told of it).
const (
	CrashBeforeReadyEntry = "executor:before-journal:ready"
	CrashAfterReadyEntry  = "executor:after-journal:ready"
)

// ReadyCrashPoints lists the executor's crash points on its readiness
// path. They are reached only by a task that becomes ready, so they are
// listed apart from CrashPoints (whose every point the driver's crash
// test reaches with a restarting task).
func ReadyCrashPoints() []string {
	return []string{CrashBeforeReadyEntry, CrashAfterReadyEntry}
}

// CrashPoints lists the executor's crash points.
func CrashPoints() []string {
	return []string{CrashBeforeRestartIntent, CrashAfterRestartIntent, CrashAfterRelaunch}
}
