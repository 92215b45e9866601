package driver

// SkipEarlyChecks makes StartTask leave capability checks to the executor,
// so that tests reach the in-executor failure path (the seed's).
func (d *Driver) SkipEarlyChecks() { d.skipEarlyChecks = true }
