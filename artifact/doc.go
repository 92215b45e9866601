// Package artifact fetches a Nomad job file's artifact blocks on this
// host before the task starts: local paths and file:// URLs (read beneath
// the task and alloc directories, or a directory the caller allows),
// http:// and https:// URLs (with headers), a checksum verified before
// anything is placed (options { checksum = "sha256:…" } or go-getter's
// ?checksum= query; md5, sha1, sha256, sha512), and archives unpacked
// (tar, tar.gz/tgz, tar.bz2/tbz2, tar.xz/txz, zip, and single .gz, .bz2,
// .xz files) unless options { archive = false }.
//
// Everything is written through taskdir.Root (openat2
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) below the destination's directory:
// an archive entry with "..", an absolute name, a symbolic link pointing
// out (and any file written through a link), a hard link out, a device
// node or a fifo is refused and nothing lands outside.
//
// hashicorp/go-getter is not used: its v1.8 module requires the AWS and
// Google Cloud SDKs (79 modules) for getters tether refuses anyway (s3,
// gcs, git, hg need credentials or tools this host may not have), and its
// local getter symlinks directories instead of copying them beneath the
// task directory. The schemes kept are small enough to own.
//
// # Usage
//
//	f := &artifact.Fetcher{Layout: layout}
//	err := f.Fetch(ctx, artifact.Artifact{Source: "https://example.com/app.tar.gz", Destination: "local/app",
//		Options: map[string]string{"checksum": "sha256:…"}})
package artifact
