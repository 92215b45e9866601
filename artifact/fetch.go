package artifact

import (
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/taskdir"
)

// Mode is how an artifact is placed (Nomad's mode; fsm.ArtifactMode: the
// spec records it).
type Mode = fsm.ArtifactMode

// Nomad's artifact modes.
const (
	// ModeAny: an archive is unpacked into the destination directory, a
	// file lands in it under its own name, a directory is copied into it.
	ModeAny = fsm.ArtifactAny
	// ModeFile: the destination is the file itself.
	ModeFile = fsm.ArtifactFile
	// ModeDir: the destination is a directory the archive or directory
	// fills.
	ModeDir = fsm.ArtifactDir
)

// ParseMode reads a mode value ("" is ModeAny).
func ParseMode(s string) (Mode, error) {
	if s == "" {
		return ModeAny, nil
	}
	for m := ModeAny; m.Valid(); m++ {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: mode %q: use \"any\", \"file\" or \"dir\"", ErrMode, s)
}

// DefaultDestination is where an artifact lands when the block names no
// destination (Nomad's "local/").
const DefaultDestination = "local/"

// Artifact is one artifact block, its run-time values interpolated
// (fsm.Artifact: the spec records it).
type Artifact = fsm.Artifact

// Limits bound what one artifact may place.
type Limits struct {
	MaxBytes int64 // bytes downloaded, and bytes unpacked
	MaxFiles int   // entries unpacked
}

// DefaultLimits are an artifact's bounds when nothing says otherwise: 300
// MiB (Nomad's default ephemeral_disk, the room a task is given) and
// Nomad's 4096 entries unpacked.
var DefaultLimits = Limits{MaxBytes: 300 << 20, MaxFiles: 4096}

// MaxBytesCeiling bounds what an artifact may ask for with OptionMaxBytes:
// Nomad's client default for what an artifact may unpack (100 GB).
const MaxBytesCeiling = 100 << 30

// OptionMaxBytes is the option that carries an artifact's own bound on the
// bytes it may place (downloaded and unpacked), in bytes: taskfile sets it
// from the task's group's ephemeral_disk size (and removes any the file
// wrote itself), so that the bound travels with the artifact to whatever
// fetches it. It replaces Fetcher.Limits.MaxBytes for that artifact, up to
// MaxBytesCeiling.
const OptionMaxBytes = "tether_max_bytes"

// Fetcher fetches a task's artifacts.
type Fetcher struct {
	// Layout is where the task's directories are.
	Layout taskdir.Layout
	// AllowRead lists host directories a local source may be read from
	// besides the task and alloc directories.
	AllowRead []string
	// Client fetches http(s) sources; nil is a client with a 30 s dial
	// and header timeout that follows at most 10 redirects.
	Client *http.Client
	// Limits bound each artifact; zero fields take DefaultLimits.
	Limits Limits
	// Owner is who placed files belong to when an artifact sets chown.
	Owner taskdir.Owner
	// TempDir spools downloads ("" is the system's); the spool file is
	// unlinked at once.
	TempDir string
}

var defaultClient = &http.Client{
	Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		TLSHandshakeTimeout:   30 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		IdleConnTimeout:       30 * time.Second,
	},
}

// limits are the bounds of artifact a: the Fetcher's (zero fields:
// DefaultLimits), its bytes replaced by a's OptionMaxBytes when it has one.
func (f *Fetcher) limits(a Artifact) (Limits, error) {
	l := f.Limits
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultLimits.MaxFiles
	}
	if v, ok := a.Options[OptionMaxBytes]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return l, fmt.Errorf("%w: option %s = %q: it must be a number of bytes", ErrSource, OptionMaxBytes, v)
		}
		l.MaxBytes = min(n, MaxBytesCeiling)
	}
	return l, nil
}

// source is a parsed artifact source.
type source struct {
	url      *url.URL // http or https
	local    string   // a host path (relative: to the task directory)
	name     string   // the file name it carries
	checksum string   // from the query
	archive  string   // from the query
}

var forced = regexp.MustCompile(`^([A-Za-z0-9]+)::(.+)$`)

// parseSource reads a source the way go-getter detects one, keeping the
// schemes tether fetches and naming the others.
func parseSource(src string) (source, error) {
	if src == "" {
		return source{}, fmt.Errorf("%w: the source is empty", ErrSource)
	}
	if m := forced.FindStringSubmatch(src); m != nil {
		switch m[1] {
		case "http", "https", "file":
			src = m[2]
		default:
			return source{}, fmt.Errorf("%w: the %q getter is not supported: tether fetches local paths, file:// and http(s):// URLs (fetch it yourself, or name an archive URL)", ErrSource, m[1])
		}
	}
	u, err := url.Parse(src)
	if err == nil && u.Scheme != "" && len(u.Scheme) > 1 {
		q := u.Query()
		s := source{checksum: q.Get("checksum"), archive: q.Get("archive")}
		q.Del("checksum")
		q.Del("archive")
		u.RawQuery = q.Encode()
		switch strings.ToLower(u.Scheme) {
		case "http", "https":
			if u.Host == "" {
				return source{}, fmt.Errorf("%w: %s has no host", ErrSource, src)
			}
			s.url, s.name = u, path.Base(u.Path)
			return s, nil
		case "file":
			if u.Path == "" {
				return source{}, fmt.Errorf("%w: %s has no path", ErrSource, src)
			}
			s.local, s.name = u.Path, filepath.Base(u.Path)
			return s, nil
		default:
			return source{}, fmt.Errorf("%w: the %q scheme is not supported: tether fetches local paths, file:// and http(s):// URLs", ErrSource, u.Scheme)
		}
	}
	for _, p := range []struct{ prefix, getter string }{
		{"github.com/", "git (GitHub shorthand)"}, {"gitlab.com/", "git (GitLab shorthand)"},
		{"bitbucket.org/", "git (Bitbucket shorthand)"}, {"git@", "git over ssh"},
		{"www.googleapis.com/storage", "gcs"},
	} {
		if strings.HasPrefix(src, p.prefix) {
			return source{}, fmt.Errorf("%w: the %s getter is not supported: tether fetches local paths, file:// and http(s):// URLs", ErrSource, p.getter)
		}
	}
	if host, _, _ := strings.Cut(src, "/"); strings.HasSuffix(host, ".amazonaws.com") {
		return source{}, fmt.Errorf("%w: the s3 getter is not supported: name the object by an https:// URL", ErrSource)
	}
	s := source{local: src}
	if p, q, ok := strings.Cut(src, "?"); ok {
		vals, err := url.ParseQuery(q)
		if err != nil {
			return source{}, fmt.Errorf("%w: %s: %w", ErrSource, src, err)
		}
		s.local, s.checksum, s.archive = p, vals.Get("checksum"), vals.Get("archive")
	}
	s.name = filepath.Base(s.local)
	return s, nil
}

// Fetch fetches a into its destination. Any failure is an *Error naming
// a.Source; nothing is written outside the destination's directory.
func (f *Fetcher) Fetch(ctx context.Context, a Artifact) error {
	if err := f.fetch(ctx, a); err != nil {
		return &Error{Source: a.Source, Err: err}
	}
	return nil
}

func (f *Fetcher) fetch(ctx context.Context, a Artifact) error {
	src, err := parseSource(a.Source)
	if err != nil {
		return definite{err}
	}
	sum := a.Options["checksum"]
	if sum == "" {
		sum = src.checksum
	}
	check, err := parseChecksum(sum)
	if err != nil {
		return definite{err}
	}
	arch := a.Options["archive"]
	if arch == "" {
		arch = src.archive
	}
	format, err := formatOf(src.name, arch)
	if err != nil {
		return err
	}
	dest := a.Destination
	if dest == "" {
		dest = DefaultDestination
	}
	dt, err := f.Layout.Resolve(dest)
	if err != nil {
		return fmt.Errorf("%w: destination %s: %w", ErrOutside, dest, err)
	}
	root, err := taskdir.OpenRoot(dt.Root)
	if err != nil {
		return err
	}
	defer root.Close()
	owner := taskdir.Keep
	if a.Chown {
		owner = f.Owner
	}
	lim, err := f.limits(a)
	if err != nil {
		return err
	}
	p := placer{root: root, dest: dt.Rel, limits: lim, owner: owner}

	if src.local != "" {
		return f.fetchLocal(ctx, src, a.Mode, format, check, &p)
	}
	spool, err := f.download(ctx, src.url, a.Headers, check, lim.MaxBytes)
	if err != nil {
		return err
	}
	defer spool.Close()
	return p.place(ctx, spool, src.name, a.Mode, format, 0o755)
}

// download spools an http(s) source to an unlinked temporary file and
// verifies its checksum.
func (f *Fetcher) download(ctx context.Context, u *url.URL, headers map[string]string, check *checksum, lim int64) (*os.File, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSource, err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	c := f.Client
	if c == nil {
		c = defaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: this host cannot reach it: %w", ErrSource, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("%w: the server answered %s", ErrSource, resp.Status)
	}
	spool, err := os.CreateTemp(f.TempDir, "tether-artifact-*")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(spool.Name())
	var w io.Writer = spool
	if check != nil {
		w = io.MultiWriter(spool, check.h)
	}
	n, err := io.Copy(w, io.LimitReader(resp.Body, lim+1))
	if err != nil {
		spool.Close()
		return nil, fmt.Errorf("%w: reading the answer: %w", ErrSource, err)
	}
	if n > lim {
		spool.Close()
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrSource, lim)
	}
	if err := check.verify(); err != nil {
		spool.Close()
		return nil, err
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		spool.Close()
		return nil, err
	}
	return spool, nil
}

// fetchLocal places a local file or directory, read beneath the task and
// alloc directories or an allowed one.
func (f *Fetcher) fetchLocal(ctx context.Context, src source, mode Mode, format Format, check *checksum, p *placer) error {
	t, err := f.Layout.ResolveRead(src.local, f.AllowRead)
	if err != nil {
		return fmt.Errorf("%w: the source %s: %w", ErrOutside, src.local, err)
	}
	sroot, err := taskdir.OpenRoot(t.Root)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSource, err)
	}
	defer sroot.Close()
	fi, err := sroot.Lstat(t.Rel)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSource, err)
	}
	if fi.IsDir() {
		if mode == ModeFile {
			return fmt.Errorf("%w: mode \"file\" but %s is a directory", ErrMode, src.local)
		}
		if check != nil {
			return fmt.Errorf("%w: a directory has no checksum", ErrChecksum)
		}
		return p.copyTree(ctx, sroot, t.Rel, p.dest)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file or directory", ErrSource, src.local)
	}
	in, err := sroot.Open(t.Rel)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSource, err)
	}
	defer in.Close()
	spool, err := os.CreateTemp(f.TempDir, "tether-artifact-*")
	if err != nil {
		return err
	}
	_ = os.Remove(spool.Name())
	defer spool.Close()
	var w io.Writer = spool
	if check != nil {
		w = io.MultiWriter(spool, check.h)
	}
	lim := p.limits.MaxBytes
	n, err := io.Copy(w, io.LimitReader(in, lim+1))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSource, err)
	}
	if n > lim {
		return fmt.Errorf("%w: larger than %d bytes", ErrSource, lim)
	}
	if err := check.verify(); err != nil {
		return err
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return p.place(ctx, spool, src.name, mode, format, fi.Mode().Perm())
}

// placer writes below root, under dest.
type placer struct {
	root   *taskdir.Root
	dest   string
	limits Limits
	owner  taskdir.Owner
	files  int
	bytes  int64
}

// place puts a fetched file where its mode and format say.
func (p *placer) place(ctx context.Context, spool *os.File, name string, mode Mode, format Format, perm fs.FileMode) error {
	switch {
	case format.dir():
		if mode == ModeFile {
			return fmt.Errorf("%w: mode \"file\" but the source is a %s archive: use mode \"dir\", or archive = false", ErrMode, format)
		}
		fi, err := spool.Stat()
		if err != nil {
			return err
		}
		if err := p.root.MkdirAll(p.dest, 0o755, p.owner); err != nil {
			return fmt.Errorf("%w: %w", ErrOutside, err)
		}
		u := &Unpacker{Root: p.root, Dest: p.dest, Limits: p.limits, Owner: p.owner}
		return u.Unpack(ctx, spool, fi.Size(), format)
	case mode == ModeDir:
		return fmt.Errorf("%w: mode \"dir\" needs an archive or a directory, and %s is neither", ErrMode, name)
	}
	rd, err := format.reader(spool)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrArchive, err)
	}
	rel := p.dest
	if mode == ModeAny {
		base := format.trim(name)
		if base == "" || base == "." || base == "/" || base == ".." {
			return fmt.Errorf("%w: the source names no file (give mode = \"file\" and a destination)", ErrSource)
		}
		rel = filepath.Join(p.dest, base)
	}
	if _, err := p.root.WriteFrom(rel, rd, p.limits.MaxBytes, perm, p.owner); err != nil {
		if errors.Is(err, taskdir.ErrOutside) || errors.Is(err, taskdir.ErrSymlink) {
			return fmt.Errorf("%w: %w", ErrOutside, err)
		}
		return err
	}
	return nil
}

// copyTree copies the directory rel of src below dst, refusing links out.
func (p *placer) copyTree(ctx context.Context, src *taskdir.Root, rel, dst string) error {
	if err := p.root.MkdirAll(dst, 0o755, p.owner); err != nil {
		return fmt.Errorf("%w: %w", ErrOutside, err)
	}
	ents, err := src.ReadDir(rel)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSource, err)
	}
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return err
		}
		if p.files++; p.files > p.limits.MaxFiles {
			return fmt.Errorf("%w: more than %d files", ErrArchive, p.limits.MaxFiles)
		}
		s, d := filepath.Join(rel, e.Name()), filepath.Join(dst, e.Name())
		fi, err := src.Lstat(s)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrSource, err)
		}
		switch {
		case fi.IsDir():
			if err := p.copyTree(ctx, src, s, d); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			in, err := src.Open(s)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrSource, err)
			}
			n, err := p.root.WriteFrom(d, in, p.limits.MaxBytes-p.bytes, fi.Mode().Perm(), p.owner)
			in.Close()
			if err != nil {
				return err
			}
			p.bytes += n
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(filepath.Join(src.Path(), s))
			if err != nil {
				return fmt.Errorf("%w: %w", ErrSource, err)
			}
			if err := p.root.Symlink(target, d); err != nil {
				return fmt.Errorf("%w: %w", ErrOutside, err)
			}
		default:
			return fmt.Errorf("%w: %s is a %s: only files, directories and links are copied", ErrArchive, s, fi.Mode().Type())
		}
	}
	return nil
}

// checksum is an expected digest and the hash that computes it.
type checksum struct {
	kind string
	want []byte
	h    hash.Hash
}

// parseChecksum reads "type:hex" (or a bare hex digest, typed by its
// length, as go-getter does).
func parseChecksum(s string) (*checksum, error) {
	if s == "" {
		return nil, nil
	}
	kind, val, ok := strings.Cut(s, ":")
	if !ok {
		val = kind
		switch len(val) {
		case 32:
			kind = "md5"
		case 40:
			kind = "sha1"
		case 64:
			kind = "sha256"
		case 128:
			kind = "sha512"
		default:
			return nil, fmt.Errorf("%w: %q: give it as type:hex (md5, sha1, sha256, sha512)", ErrChecksum, s)
		}
	}
	c := &checksum{kind: kind}
	switch kind {
	case "md5":
		c.h = md5.New()
	case "sha1":
		c.h = sha1.New()
	case "sha256":
		c.h = sha256.New()
	case "sha512":
		c.h = sha512.New()
	case "file":
		return nil, fmt.Errorf("%w: checksum files (file:URL) are not supported: give the digest as type:hex", ErrChecksum)
	default:
		return nil, fmt.Errorf("%w: unknown checksum type %q: use md5, sha1, sha256 or sha512", ErrChecksum, kind)
	}
	want, err := hex.DecodeString(val)
	if err != nil || len(want) != c.h.Size() {
		return nil, fmt.Errorf("%w: %q is not a %s digest in hex", ErrChecksum, val, kind)
	}
	c.want = want
	return c, nil
}

func (c *checksum) verify() error {
	if c == nil {
		return nil
	}
	got := c.h.Sum(nil)
	if hex.EncodeToString(got) != hex.EncodeToString(c.want) {
		return fmt.Errorf("%w: %s is %x, the artifact says %x", ErrChecksum, c.kind, got, c.want)
	}
	return nil
}

func quote(s string) string { return strconv.Quote(s) }
