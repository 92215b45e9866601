// Package spec is what a task's spec means on this host, for the driver's
// side (checked before anything is spawned) and the executor's (again at
// launch) alike: the user it runs as, its capabilities against the allow
// list, the chroot entries of an exec task's root, the command resolved as
// execvp would, its environment, and Check, the one host check of a spec.
package spec
