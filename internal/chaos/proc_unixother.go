//go:build unix && !linux

package chaos

import "os/exec"

// setProcAttr: without Linux's parent-death signal, a node notices that the
// harness died when its stdin closes.
func setProcAttr(*exec.Cmd) {}
