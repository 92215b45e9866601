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

// CrashPoints lists the executor's crash points on its restart path (those
// of its readiness path are reached only by a task that becomes ready:
// the driver's crash test reaches every point listed here with a
// restarting task).
func CrashPoints() []string {
	return []string{CrashBeforeRestartIntent, CrashAfterRestartIntent, CrashAfterRelaunch}
}
