package template

import "errors"

// Errors returned by Render and the Watcher.
var (
	// ErrServerFunction is returned for a template that calls a function
	// that needs Consul, Vault or a Nomad server (key, secret, service,
	// nomadVar...): tether has none, and says so instead of waiting.
	ErrServerFunction = errors.New("template: function needs a server tether does not have")
	// ErrUnsupportedFunction is returned for a consul-template function
	// tether does not provide (plugin runs a host command, writeToFile
	// writes outside the destination, sockaddr needs the host's network
	// layout).
	ErrUnsupportedFunction = errors.New("template: function not supported")
	// ErrBadTemplate is returned for a template block that cannot be
	// rendered: no data and no source, both, a bad delimiter, perms or
	// change_mode, or a template that does not parse or execute.
	ErrBadTemplate = errors.New("template: bad template")
	// ErrRead is returned when a source or a file the template reads cannot
	// be read, or lies outside the task and alloc directories (and every
	// directory the caller allowed).
	ErrRead = errors.New("template: cannot read")
	// ErrWrite is returned when the destination cannot be written, or lies
	// outside the task and alloc directories.
	ErrWrite = errors.New("template: cannot write the destination")
	// ErrEnvFile is returned for a template with env = true whose output
	// is not KEY=VALUE lines.
	ErrEnvFile = errors.New("template: bad environment file")
)
