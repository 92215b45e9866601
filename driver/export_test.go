package driver

// SkipEarlyChecks makes StartTask leave capability checks to the executor,
// so that tests reach the in-executor failure path (the seed's).
func (d *Driver) SkipEarlyChecks() { d.skipEarlyChecks = true }

// hasOwner reports whether task id has a live owner in d.
func (d *Driver) hasOwner(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tasks[id] != nil
}
