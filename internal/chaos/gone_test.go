package chaos

import (
	"errors"
	"io"
	"os"
	"testing"
)

// TestProcGone: a write to a stopped node's stdin (a twin stopped, a kill)
// is told apart from a failure to inject into a node that still runs.
func TestProcGone(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	running := &proc{stdin: w, exited: make(chan struct{})}
	w.Close()
	_, werr := io.WriteString(w, "clock 1 0s\n")
	if !running.gone(werr) {
		t.Errorf("a write to a closed stdin (%v) is not taken for a stopped process", werr)
	}
	if !running.gone(os.ErrProcessDone) {
		t.Error("a signal to a finished process is not taken for a stopped process")
	}
	if running.gone(errors.New("disk full")) {
		t.Error("another error on a running process is taken for a stopped process: a real injection failure would be hidden")
	}
	exited := &proc{exited: make(chan struct{})}
	close(exited.exited)
	if !exited.gone(errors.New("any")) {
		t.Error("an exited process is not gone")
	}
}
