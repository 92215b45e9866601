//go:build !withexec

package driver

import (
	"errors"

	"github.com/hashicorp/go-hclog"
)

// Temporary until the executor package lands: NewReal is unavailable.
func NewReal(stateDir string, command []string, log hclog.Logger) Executors { return nil }

func validateCaps(add, drop, allowed []string) error { return errors.New("pending") }
