package checkpoint

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrOutside: the process runs in no recorded agentbox session (AGENTBOX_CHECKPOINT
// is unset).
var ErrOutside = errors.New("not inside a recorded agentbox session (AGENTBOX_CHECKPOINT is not set)")

// answerTimeout bounds the wait for the launcher's answer: the recorder's own
// deadline and the walk, with room.
const answerTimeout = 3 * time.Minute

// dialTimeout bounds the wait for room in the endpoint's backlog.
const dialTimeout = 30 * time.Second

// dial connects to the endpoint at sock. Its backlog is short and drained at a
// pace (Server), and a connect to a full one fails with EAGAIN at once rather
// than waiting: so it retries at that pace until within.
func dial(sock string, within time.Duration) (net.Conn, error) {
	end := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("unix", sock, 5*time.Second)
		if err == nil || !errors.Is(err, syscall.EAGAIN) || time.Now().After(end) {
			return c, err
		}
		time.Sleep(acceptGap)
	}
}

// Request asks the launcher for a checkpoint with msg and returns its step.
func Request(msg string) (int, error) {
	sock := os.Getenv(Env)
	if sock == "" {
		return 0, ErrOutside
	}
	if len(msg) > maxRequest {
		return 0, fmt.Errorf("the message is longer than %d bytes", maxRequest)
	}
	c, err := dial(sock, dialTimeout)
	if err != nil {
		return 0, fmt.Errorf("cannot reach the launcher at %s=%s: %v", Env, sock, err)
	}
	uc := c.(*net.UnixConn)
	defer uc.Close()
	uc.SetDeadline(time.Now().Add(answerTimeout))
	if _, err := uc.Write([]byte(msg)); err != nil {
		return 0, fmt.Errorf("sending the request: %v", err)
	}
	if err := uc.CloseWrite(); err != nil {
		return 0, fmt.Errorf("sending the request: %v", err)
	}
	line, err := bufio.NewReader(uc).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("no answer from the launcher: %v", err)
	}
	line = strings.TrimSuffix(line, "\n")
	if n, ok := strings.CutPrefix(line, "ok "); ok {
		if step, err := strconv.Atoi(n); err == nil {
			return step, nil
		}
	}
	return 0, errors.New(oneLine(strings.TrimPrefix(line, "refused: ")))
}
