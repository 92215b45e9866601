// Package template renders a Nomad job file's template blocks on this
// host, before the task starts, with no Consul, Vault or Nomad server.
//
// A template's data (or the file named by its source) is a Go
// text/template with Nomad's default delimiters {{ }} (left_delimiter and
// right_delimiter change them), executed with the functions consul-template
// offers that need no server: env (the task's environment, never the
// renderer's), envOrDefault, file (beneath the task and alloc directories,
// or a directory the caller allows), base64Encode/Decode,
// toJSON/toJSONPretty/parseJSON, parseBool/Int/Uint/Float, split, join,
// toLower/Upper/Title, replaceAll, trim*, contains*, in, indent, loop,
// add/subtract/multiply/divide/modulo, minimum/maximum, regexMatch,
// regexReplaceAll, sha256Hex, md5sum, timestamp. A template that names key,
// secret, service, nomadVar and the other server functions is refused
// before anything is written, with an error naming the function and the
// server it needs (ErrServerFunction).
//
// The output is written atomically to the destination through
// taskdir.Root (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) below the task
// directory or the group's alloc directory, with perms, uid and gid; an
// env = true template's KEY=VALUE lines come back in Result.Env for the
// task's environment.
//
// Consul-template itself is not used: it links the Consul, Vault and Nomad
// API clients (64 modules, github.com/hashicorp/nomad/api among them) to
// serve the functions tether refuses anyway, and reads files and the
// environment of the process that renders.
//
// # Usage
//
//	r := &template.Renderer{Layout: layout, Env: taskEnv, Owner: taskdir.Owner{UID: uid, GID: gid}}
//	res, err := r.Render(template.Template{Data: "port={{ env \"NOMAD_PORT_http\" }}\n", Destination: "local/app.conf"})
//
// # Change modes
//
// A Watcher re-renders a template when its source, or a file it read with
// the file function, changes (inotify through fsnotify), and reports the
// template's change_mode (restart, signal with change_signal, noop) on a
// channel for the executor to act on: the package itself signals or
// restarts nothing.
package template
