// Package wire is what the executor's client (package executor) and the
// executor process (package executor/server) share, defined once: the
// control protocol (frames, requests, responses, the named errors that
// cross it, the protocol version), the messages' types (Launch,
// Status, ExecSpec), and the side files the executor leaves in its task
// directory (identity, launch record, exit record, restart journal) with
// their readers and the checks that make a driver believe them.
package wire
