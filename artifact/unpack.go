package artifact

import (
	"archive/tar"
	"archive/zip"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/ulikunitz/xz"

	"github.com/tether-fsm/tether/taskdir"
)

// Format is an archive or compression format.
type Format uint8

// The formats Fetch recognises by the source's file name (or the archive
// option).
const (
	FormatNone Format = iota
	FormatTar
	FormatTarGz
	FormatTarBz2
	FormatTarXz
	FormatZip
	FormatGz
	FormatBz2
	FormatXz
)

var formats = []struct {
	f      Format
	name   string
	suffix []string
}{
	{FormatTarGz, "tar.gz", []string{".tar.gz", ".tgz"}},
	{FormatTarBz2, "tar.bz2", []string{".tar.bz2", ".tbz2"}},
	{FormatTarXz, "tar.xz", []string{".tar.xz", ".txz"}},
	{FormatTar, "tar", []string{".tar"}},
	{FormatZip, "zip", []string{".zip"}},
	{FormatGz, "gz", []string{".gz"}},
	{FormatBz2, "bz2", []string{".bz2"}},
	{FormatXz, "xz", []string{".xz"}},
}

func (f Format) String() string {
	for _, x := range formats {
		if x.f == f {
			return x.name
		}
	}
	return "none"
}

// dir reports whether the format unpacks into a directory.
func (f Format) dir() bool {
	switch f {
	case FormatTar, FormatTarGz, FormatTarBz2, FormatTarXz, FormatZip:
		return true
	}
	return false
}

// trim is the name a single compressed file unpacks to.
func (f Format) trim(name string) string {
	for _, x := range formats {
		if x.f == f {
			for _, s := range x.suffix {
				if t, ok := strings.CutSuffix(name, s); ok {
					return t
				}
			}
		}
	}
	return name
}

// reader decompresses a single-file format (and passes others through).
func (f Format) reader(r io.Reader) (io.Reader, error) {
	switch f {
	case FormatGz, FormatTarGz:
		return gzip.NewReader(r)
	case FormatBz2, FormatTarBz2:
		return bzip2.NewReader(r), nil
	case FormatXz, FormatTarXz:
		return xz.NewReader(r)
	}
	return r, nil
}

// formatOf picks the format from the archive option ("false" for none, a
// format name to force one) or the file name's suffix.
func formatOf(name, opt string) (Format, error) {
	switch opt {
	case "":
	case "false":
		return FormatNone, nil
	default:
		for _, x := range formats {
			if x.name == opt || "."+x.name == opt {
				return x.f, nil
			}
		}
		return 0, fmt.Errorf("%w: archive = %q: use false, or one of tar, tar.gz, tar.bz2, tar.xz, zip, gz, bz2, xz", ErrArchive, opt)
	}
	lower := strings.ToLower(name)
	for _, x := range formats {
		for _, s := range x.suffix {
			if strings.HasSuffix(lower, s) && len(lower) > len(s) {
				return x.f, nil
			}
		}
	}
	return FormatNone, nil
}

// Unpacker unpacks an archive below Dest in Root. Every entry is written
// through Root: an entry that would land outside Dest, a link that points
// out, a hard link to something that is not a file already unpacked, a
// device node or a fifo is refused, and nothing is written outside.
type Unpacker struct {
	Root   *taskdir.Root
	Dest   string // relative to Root
	Limits Limits
	Owner  taskdir.Owner
	files  int
	bytes  int64
}

// Unpack reads an archive of format from r (size bytes; zip needs them).
func (u *Unpacker) Unpack(ctx context.Context, r io.ReaderAt, size int64, format Format) error {
	if u.Limits.MaxBytes <= 0 {
		u.Limits.MaxBytes = DefaultLimits.MaxBytes
	}
	if u.Limits.MaxFiles <= 0 {
		u.Limits.MaxFiles = DefaultLimits.MaxFiles
	}
	if format == FormatZip {
		return u.unzip(ctx, r, size)
	}
	rd, err := format.reader(io.NewSectionReader(r, 0, size))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrArchive, err)
	}
	return u.untar(ctx, rd)
}

// entry checks an archive entry's name and returns where it lands, "" for
// the archive's root.
func (u *Unpacker) entry(name string) (string, error) {
	if u.files++; u.files > u.Limits.MaxFiles {
		return "", fmt.Errorf("%w: more than %d entries", ErrArchive, u.Limits.MaxFiles)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("%w: entry %q holds a NUL byte", ErrArchive, name)
	}
	if strings.HasPrefix(name, "/") || strings.HasPrefix(name, `\`) {
		return "", fmt.Errorf("%w: entry %q is an absolute path", ErrOutside, name)
	}
	for _, part := range strings.FieldsFunc(name, func(r rune) bool { return r == '/' || r == '\\' }) {
		if part == ".." {
			return "", fmt.Errorf("%w: entry %q climbs out with \"..\"", ErrOutside, name)
		}
	}
	c := path.Clean(name)
	if c == "." {
		return "", nil
	}
	return path.Join(u.Dest, c), nil
}

func (u *Unpacker) wrap(err error) error {
	if errors.Is(err, taskdir.ErrOutside) || errors.Is(err, taskdir.ErrSymlink) || errors.Is(err, taskdir.ErrNotDir) {
		return fmt.Errorf("%w: %w", ErrOutside, err)
	}
	return fmt.Errorf("%w: %w", ErrArchive, err)
}

func (u *Unpacker) file(rel string, r io.Reader, perm fs.FileMode) error {
	n, err := u.Root.WriteFrom(rel, r, u.Limits.MaxBytes-u.bytes, perm.Perm(), u.Owner)
	u.bytes += n
	if err != nil {
		if u.bytes > u.Limits.MaxBytes {
			return fmt.Errorf("%w: more than %d bytes unpacked", ErrArchive, u.Limits.MaxBytes)
		}
		return u.wrap(err)
	}
	return nil
}

// linkTarget checks a symbolic link entry: relative, and pointing below
// Dest from where the link is.
func (u *Unpacker) symlink(rel, target string) error {
	if target == "" || path.IsAbs(target) {
		return fmt.Errorf("%w: link %s -> %q points outside", ErrOutside, rel, target)
	}
	resolved := path.Join(path.Dir(rel), target)
	inside := resolved == u.Dest || strings.HasPrefix(resolved, u.Dest+"/")
	if u.Dest == "." {
		inside = resolved != ".." && !strings.HasPrefix(resolved, "../")
	}
	if !inside {
		return fmt.Errorf("%w: link %s -> %q points outside %s", ErrOutside, rel, target, u.Dest)
	}
	if err := u.Root.Symlink(target, rel); err != nil {
		return u.wrap(err)
	}
	return nil
}

func (u *Unpacker) untar(ctx context.Context, r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrArchive, err)
		}
		rel, err := u.entry(h.Name)
		if err != nil {
			return err
		}
		if rel == "" {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := u.Root.MkdirAll(rel, fs.FileMode(h.Mode).Perm()|0o700, u.Owner); err != nil {
				return u.wrap(err)
			}
		case tar.TypeReg:
			if err := u.file(rel, tr, fs.FileMode(h.Mode)); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := u.symlink(rel, h.Linkname); err != nil {
				return err
			}
		case tar.TypeLink:
			old, err := u.entry(h.Linkname)
			u.files--
			if err != nil {
				return fmt.Errorf("%w: hard link %s -> %q: %w", ErrOutside, h.Name, h.Linkname, err)
			}
			if old == "" {
				return fmt.Errorf("%w: hard link %s -> %q", ErrOutside, h.Name, h.Linkname)
			}
			if err := u.Root.Link(old, rel); err != nil {
				return u.wrap(err)
			}
		case tar.TypeXGlobalHeader:
		default:
			return fmt.Errorf("%w: entry %q is a %s: only files, directories and links are unpacked", ErrArchive, h.Name, tarType(h.Typeflag))
		}
	}
}

func tarType(t byte) string {
	switch t {
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "fifo"
	}
	return fmt.Sprintf("type %q entry", t)
}

func (u *Unpacker) unzip(ctx context.Context, r io.ReaderAt, size int64) error {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrArchive, err)
	}
	for _, zf := range zr.File {
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := u.entry(zf.Name)
		if err != nil {
			return err
		}
		if rel == "" {
			continue
		}
		mode := zf.Mode()
		switch {
		case mode.IsDir():
			if err := u.Root.MkdirAll(rel, mode.Perm()|0o700, u.Owner); err != nil {
				return u.wrap(err)
			}
		case mode&fs.ModeSymlink != 0:
			rc, err := zf.Open()
			if err != nil {
				return fmt.Errorf("%w: %w", ErrArchive, err)
			}
			target, err := io.ReadAll(io.LimitReader(rc, 4096))
			rc.Close()
			if err != nil {
				return fmt.Errorf("%w: %w", ErrArchive, err)
			}
			if err := u.symlink(rel, string(target)); err != nil {
				return err
			}
		case mode.IsRegular():
			rc, err := zf.Open()
			if err != nil {
				return fmt.Errorf("%w: %w", ErrArchive, err)
			}
			perm := mode.Perm()
			if perm == 0 {
				perm = 0o644
			}
			err = u.file(rel, rc, perm)
			rc.Close()
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: entry %q is a %s: only files, directories and links are unpacked", ErrArchive, zf.Name, mode.Type())
		}
	}
	return nil
}
