package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/session/checkpoint"
)

var checkpointCommand = cli.Command{
	Name:    "checkpoint",
	Args:    "[MESSAGE...]",
	Summary: "inside a session: record the working tree as a step of the session",
	Help: `Run inside an agentbox session: the launcher records the working tree as it is
now as the session's next step, with MESSAGE. 'agentbox log' lists the steps;
'agentbox diff SESSION@N' and 'agentbox show SESSION@N' show step N, and
'agentbox undo --to SESSION@N' puts the tree back as it was at that step (step 0:
the session's start). A session takes one checkpoint at a time, not more often
than the last one took to record, and at most 1,000: a checkpoint asked for while
another is recorded, or too soon after it, waits its turn (at most about 6.5
minutes), and fails when the session ends meanwhile.
--hook reads an agent's hook event (JSON on stdin, as Claude Code and Codex send
it) and names the step after its tool; outside a session it does nothing, it does
not wait its turn, and a checkpoint refused as under way or too soon is not an error
(docs/agents.md).`,
	Flags: func() *flag.FlagSet { fs, _ := checkpointFlags(); return fs },
}

func checkpointFlags() (*flag.FlagSet, *bool) {
	fs := flag.NewFlagSet("checkpoint", flag.ContinueOnError)
	hook := fs.Bool("hook", false, "take the message from an agent's hook event on stdin; quiet outside a session")
	return fs, hook
}

func cmdCheckpoint(args []string) int {
	fset, hook := checkpointFlags()
	if st, done := parseFlags(fset, checkpointCommand, args); done {
		return st
	}
	msg := strings.Join(fset.Args(), " ")
	if *hook {
		if os.Getenv(checkpoint.Env) == "" {
			return 0 // the agent runs outside agentbox: nothing to record
		}
		if args := fset.Args(); len(args) == 1 && strings.HasPrefix(args[0], "{") {
			msg = hookMessage(strings.NewReader(args[0])) // Codex's notify: the event is the last argument
		} else if msg == "" {
			msg = hookMessage(os.Stdin)
		}
	}
	// An agent's hook must not stall its step behind a checkpoint under way: it asks
	// once. A checkpoint asked for by name waits its turn (checkpoint.Queue).
	request := checkpoint.Queue
	if *hook {
		request = checkpoint.Request
	}
	step, err := request(msg)
	switch {
	case err == nil:
		fmt.Fprintf(os.Stderr, "agentbox: checkpoint: step %d of session %s\n", step, oneLine(os.Getenv("AGENTBOX_SESSION")))
		return 0
	case errors.Is(err, checkpoint.ErrOutside):
		return fail("checkpoint: %v", err)
	case *hook:
		// An agent's step goes on whatever the record says.
		fmt.Fprintf(os.Stderr, "agentbox: checkpoint: %s\n", oneLine(err.Error()))
		return 0
	}
	fmt.Fprintf(os.Stderr, "agentbox: checkpoint: %s\n", oneLine(err.Error()))
	return 1
}

// maxHookEvent bounds what --hook reads of stdin: a hook event holds the tool's
// input and output, of which only the names are used.
const maxHookEvent = 4 << 20

// hookMessage names a hook event read from r: its event, tool and the file or
// command the tool was given ("PostToolUse Edit src/main.go"); "" when r holds
// no event. It waits for stdin at most a few seconds.
func hookMessage(r io.Reader) string {
	type result struct{ b []byte }
	ch := make(chan result, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(r, maxHookEvent))
		ch <- result{b}
	}()
	var b []byte
	select {
	case res := <-ch:
		b = res.b
	case <-time.After(5 * time.Second):
		return ""
	}
	var ev struct {
		Type  string `json:"type"` // Codex's notify: "agent-turn-complete"
		Last  string `json:"last-assistant-message"`
		Event string `json:"hook_event_name"`
		Tool  string `json:"tool_name"`
		Input struct {
			FilePath string `json:"file_path"`
			Path     string `json:"path"`
			Command  any    `json:"command"`
		} `json:"tool_input"`
	}
	if json.Unmarshal(b, &ev) != nil {
		return ""
	}
	if ev.Type != "" && ev.Event == "" {
		return shorten("Codex turn: " + ev.Last)
	}
	parts := []string{ev.Event, ev.Tool}
	switch c := ev.Input.Command.(type) {
	case string:
		parts = append(parts, c)
	case []any:
		for _, a := range c {
			if s, ok := a.(string); ok {
				parts = append(parts, s)
			}
		}
	}
	parts = append(parts, ev.Input.FilePath, ev.Input.Path)
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return shorten(strings.Join(out, " "))
}

// shorten cuts a step's name from an event to 200 bytes.
func shorten(msg string) string {
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return msg
}
