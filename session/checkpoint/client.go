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

// dialTimeout bounds Request's wait for room in the endpoint's backlog.
const dialTimeout = 30 * time.Second

// queueTimeout bounds Queue's whole wait for its turn: a checkpoint under way
// may take as long as answerTimeout allows, and the next one starts no sooner
// than that long after it ended (Server).
const queueTimeout = 2*answerTimeout + dialTimeout

// dial connects to the endpoint at sock. Its backlog is short and drained at a
// pace (Server), and a connect to a full one fails with EAGAIN at once rather
// than waiting: so it retries at that pace until end. EAGAIN says the launcher
// listens; a launcher gone (the session ended) is ECONNREFUSED or ENOENT, at once.
func dial(sock string, end time.Time) (net.Conn, error) {
	for {
		c, err := net.DialTimeout("unix", sock, 5*time.Second)
		if err == nil || !errors.Is(err, syscall.EAGAIN) || time.Now().After(end) {
			return c, err
		}
		time.Sleep(acceptGap)
	}
}

// Queue is Request that waits its turn: while the launcher answers that a
// checkpoint is under way, or that the next is too soon (with the wait it names),
// it asks again, until queueTimeout. Any other answer, and a launcher gone, ends it.
func Queue(msg string) (int, error) {
	end := time.Now().Add(queueTimeout)
	for {
		step, wait, err := request(msg, end)
		if wait == 0 || time.Now().Add(wait).After(end) {
			return step, err
		}
		time.Sleep(wait)
	}
}

// Request asks the launcher for a checkpoint with msg and returns its step; a
// checkpoint under way or too soon is refused (an error) at once.
func Request(msg string) (int, error) {
	step, _, err := request(msg, time.Now().Add(dialTimeout))
	return step, err
}

// busyPoll is how often Queue asks again while a checkpoint is under way.
const busyPoll = minInterval

// request asks once, dialling until end; wait is how long the launcher says to
// wait before asking again (0: its answer stands).
func request(msg string, end time.Time) (step int, wait time.Duration, err error) {
	sock := os.Getenv(Env)
	if sock == "" {
		return 0, 0, ErrOutside
	}
	if len(msg) > maxRequest {
		return 0, 0, fmt.Errorf("the message is longer than %d bytes", maxRequest)
	}
	c, err := dial(sock, end)
	if err != nil {
		return 0, 0, fmt.Errorf("cannot reach the launcher at %s=%s: %v", Env, sock, err)
	}
	uc := c.(*net.UnixConn)
	defer uc.Close()
	uc.SetDeadline(time.Now().Add(answerTimeout))
	if _, err := uc.Write([]byte(msg)); err != nil {
		return 0, 0, fmt.Errorf("sending the request: %v", err)
	}
	if err := uc.CloseWrite(); err != nil {
		return 0, 0, fmt.Errorf("sending the request: %v", err)
	}
	line, err := bufio.NewReader(uc).ReadString('\n')
	if err != nil {
		return 0, 0, fmt.Errorf("no answer from the launcher: %v", err)
	}
	line = strings.TrimSuffix(line, "\n")
	if n, ok := strings.CutPrefix(line, "ok "); ok {
		if step, err := strconv.Atoi(n); err == nil {
			return step, 0, nil
		}
	}
	why := strings.TrimPrefix(line, "refused: ")
	return 0, retryAfter(why), errors.New(oneLine(why))
}

// retryAfter is the wait a refusal names: busyPoll while a checkpoint is under
// way, the named wait (at least busyPoll) when the next is too soon, 0 otherwise.
func retryAfter(why string) time.Duration {
	if why == refusedUnderWay {
		return busyPoll
	}
	if d, ok := strings.CutPrefix(why, refusedTooSoon); ok {
		if wait, err := time.ParseDuration(d); err == nil {
			return max(wait, busyPoll)
		}
	}
	return 0
}
