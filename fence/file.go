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

// FilePersister keeps the highest token per resource in one JSON file. Every
// Save writes the whole file to a temporary file in the same directory,
// fsyncs it, renames it over the old one and fsyncs the directory, so the file
// on disk is always either the old or the new version and Save returns only
// once the new one is durable.
//
// One FilePersister (one Guard, one process) must own a file: two processes
// sharing it would each overwrite the other's tokens. It suits tens to a few
// thousands of resources: each Save rewrites every entry.
type FilePersister struct {
	path string

	mu     sync.Mutex
	tokens map[string]int64
}

type fileFormat struct {
	Version int              `json:"version"`
	Tokens  map[string]int64 `json:"tokens"`
}

// NewFilePersister opens the token file at path. A missing file is an empty
// record (the first start); a file that cannot be read or parsed is an error,
// never silently an empty record, since forgetting tokens would admit stale
// writers again.
func NewFilePersister(path string) (*FilePersister, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: token file path is empty", ErrInvalid)
	}
	p := &FilePersister{path: path, tokens: make(map[string]int64)}
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
	if f.Version != 1 {
		return nil, fmt.Errorf("leasehold/fence: token file %s has version %d, want 1", path, f.Version)
	}
	for r, t := range f.Tokens {
		if t < 0 {
			return nil, fmt.Errorf("leasehold/fence: token file %s has negative token %d for %q", path, t, r)
		}
		p.tokens[r] = t
	}
	return p, nil
}

// Load returns the saved token of resource, or 0.
func (p *FilePersister) Load(_ context.Context, resource string) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tokens[resource], nil
}

// Save records token for resource and returns once the file is durable. A
// token lower than the saved one is ignored (the record never goes down).
func (p *FilePersister) Save(_ context.Context, resource string, token int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if token <= p.tokens[resource] {
		return nil
	}
	next := make(map[string]int64, len(p.tokens)+1)
	for r, t := range p.tokens {
		next[r] = t
	}
	next[resource] = token
	if err := p.write(next); err != nil {
		return err
	}
	p.tokens = next
	return nil
}

func (p *FilePersister) write(tokens map[string]int64) (err error) {
	b, err := json.Marshal(fileFormat{Version: 1, Tokens: tokens})
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
