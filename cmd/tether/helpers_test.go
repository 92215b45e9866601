package main

import "github.com/tether-fsm/tether/driver"

func validateID(id string) error { return driver.ValidateTaskID(id) }
