package seccomp

import (
	"fmt"
	"path/filepath"
)

// ChoiceKind is what a task's seccomp option asks for.
type ChoiceKind uint8

const (
	ChoiceDefault    ChoiceKind = iota // Docker's default profile, with the floor
	ChoiceUnconfined                   // no filter
	ChoiceProfile                      // a profile file, with the floor
)

// Choice is a task's `seccomp = "default" | "unconfined" | "PATH"`. Whether
// the operator allows it is the operator's policy's to say, beside the
// capability allow list (tether's executor/internal/spec.CheckSeccomp,
// which a driver links without this package).
type Choice struct {
	Kind ChoiceKind
	Path string // for ChoiceProfile: absolute and clean
}

// ParseChoice reads the option: "" and "default" are the default,
// "unconfined" no filter, an absolute path a profile file.
func ParseChoice(s string) (Choice, error) {
	switch {
	case s == "" || s == "default":
		return Choice{Kind: ChoiceDefault}, nil
	case s == "unconfined":
		return Choice{Kind: ChoiceUnconfined}, nil
	case filepath.IsAbs(s):
		return Choice{Kind: ChoiceProfile, Path: filepath.Clean(s)}, nil
	}
	return Choice{}, fmt.Errorf("%w: %q", ErrBadChoice, s)
}

func (c Choice) String() string {
	switch c.Kind {
	case ChoiceUnconfined:
		return "unconfined"
	case ChoiceProfile:
		return c.Path
	}
	return "default"
}

// Profile returns the profile the choice names: the default one, the file
// loaded and validated, or nil for unconfined.
func (c Choice) Profile() (*Profile, error) {
	switch c.Kind {
	case ChoiceUnconfined:
		return nil, nil
	case ChoiceProfile:
		return Load(c.Path)
	}
	return Default(), nil
}
