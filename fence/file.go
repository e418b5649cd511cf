package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// FilePersister keeps the highest term (token and holder) per resource in one
// JSON file. Every Save writes the whole file to a temporary file in the same
// directory, fsyncs it, renames it over the old one and fsyncs the directory,
// so the file on disk is always either the old or the new version and Save
// returns only once the new one is durable.
//
// The file is version 2:
//
//	{"version":2,"terms":{"sweeper":{"token":3,"holder":"node-a-4f2c"}}}
//
// A version 1 file (tokens only, {"version":1,"tokens":{"sweeper":3}}, written
// before fences kept holders) is read with every holder unknown: an equal
// token is then refused whoever presents it, and a higher one admitted, so
// the term that held the lease at the upgrade writes again only from its next
// term on. The next Save writes version 2. A binary that knows only version 1
// refuses a version 2 file rather than start from zero.
//
// One FilePersister (one Guard, one process) must own a file: two processes
// sharing it would each overwrite the other's tokens. It suits tens to a few
// thousands of resources: each Save rewrites every entry.
type FilePersister struct {
	path string

	mu    sync.Mutex
	terms map[string]Admitted
}

const fileVersion = 2

type fileTerm struct {
	Token  int64  `json:"token"`
	Holder string `json:"holder,omitempty"`
}

type fileFormat struct {
	Version int                 `json:"version"`
	Terms   map[string]fileTerm `json:"terms,omitempty"`
	Tokens  map[string]int64    `json:"tokens,omitempty"` // version 1
}

// NewFilePersister opens the token file at path. A missing file is an empty
// record (the first start); a file that cannot be read or parsed is an error,
// never silently an empty record, since forgetting tokens would admit stale
// writers again.
func NewFilePersister(path string) (*FilePersister, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: token file path is empty", ErrInvalid)
	}
	p := &FilePersister{path: path, terms: make(map[string]Admitted)}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return p, nil
	case err != nil:
		return nil, fmt.Errorf("leasehold/fence: read token file: %w", err)
	}
	var f fileFormat
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("leasehold/fence: token file %s is corrupt (refusing to start from zero): %w", path, err)
	}
	switch f.Version {
	case 1:
		if f.Terms != nil {
			return nil, fmt.Errorf("leasehold/fence: token file %s is corrupt: version 1 with \"terms\"", path)
		}
		for r, t := range f.Tokens {
			if t < 0 {
				return nil, fmt.Errorf("leasehold/fence: token file %s has negative token %d for %q", path, t, r)
			}
			p.terms[r] = Admitted{Token: t} // holder unknown: an equal token is refused
		}
	case fileVersion:
		if f.Tokens != nil {
			return nil, fmt.Errorf("leasehold/fence: token file %s is corrupt: version 2 with \"tokens\"", path)
		}
		for r, t := range f.Terms {
			if t.Token < 0 {
				return nil, fmt.Errorf("leasehold/fence: token file %s has negative token %d for %q", path, t.Token, r)
			}
			if t.Holder != "" {
				if err := ValidateHolder(t.Holder); err != nil {
					return nil, fmt.Errorf("leasehold/fence: token file %s has a bad holder for %q: %w", path, r, err)
				}
			}
			p.terms[r] = Admitted{Token: t.Token, Holder: t.Holder}
		}
	default:
		return nil, fmt.Errorf("leasehold/fence: token file %s has version %d, want 1 or 2", path, f.Version)
	}
	return p, nil
}

// Load returns the saved term of resource, or the zero Admitted.
func (p *FilePersister) Load(_ context.Context, resource string) (Admitted, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.terms[resource], nil
}

// Save records a for resource and returns once the file is durable. A term
// whose token is lower than the saved one is ignored (the record never goes
// down), and so is one with the saved token (its holder was decided when that
// token was first saved; the Guard never asks to change it).
func (p *FilePersister) Save(_ context.Context, resource string, a Admitted) error {
	if err := ValidateHolder(a.Holder); err != nil {
		return fmt.Errorf("leasehold/fence: save %q: %w", resource, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if a.Token <= p.terms[resource].Token {
		return nil
	}
	next := make(map[string]Admitted, len(p.terms)+1)
	for r, t := range p.terms {
		next[r] = t
	}
	next[resource] = a
	if err := p.write(next); err != nil {
		return err
	}
	p.terms = next
	return nil
}

func (p *FilePersister) write(terms map[string]Admitted) (err error) {
	f := fileFormat{Version: fileVersion, Terms: make(map[string]fileTerm, len(terms))}
	for r, t := range terms {
		f.Terms[r] = fileTerm{Token: t.Token, Holder: t.Holder}
	}
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("leasehold/fence: encode token file: %w", err)
	}
	dir := filepath.Dir(p.path)
	tmp, err := os.CreateTemp(dir, filepath.Base(p.path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("leasehold/fence: write token file: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(b); err != nil {
		return fmt.Errorf("leasehold/fence: write token file: %w", err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("leasehold/fence: fsync token file: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("leasehold/fence: write token file: %w", err)
	}
	if err = os.Rename(tmp.Name(), p.path); err != nil {
		return fmt.Errorf("leasehold/fence: replace token file: %w", err)
	}
	// The rename is durable only once the directory is.
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("leasehold/fence: fsync token directory: %w", err)
	}
	defer d.Close()
	if err = d.Sync(); err != nil {
		return fmt.Errorf("leasehold/fence: fsync token directory: %w", err)
	}
	return nil
}
