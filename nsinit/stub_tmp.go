package nsinit

import (
	"errors"

	"github.com/agentbox/agentbox/mounts"
)

func IsInit() bool { return false }
func Main()        {}
func Run(plan mounts.Plan, stdio Stdio) (Result, error) {
	return Result{}, errors.New("not yet")
}
