//go:build !unix

package cli

import (
	"context"
	"errors"
)

const demoWorkerCommand = "__demo-worker"

type unsupportedCmd struct{}

func (unsupportedCmd) Run(context.Context, []string) error {
	return errors.New("the demo needs process groups and signals (Linux or another Unix)")
}

func newDemoCmd(env *Env) Command       { return unsupportedCmd{} }
func newDemoWorkerCmd(env *Env) Command { return unsupportedCmd{} }
