package kmatrix

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/kmatrix/vmproto"
)

// consoleLog is what the VM's init reported, read from its console.
type consoleLog struct {
	Release  string
	Done     bool
	Errors   []string
	Sections []section
}

// section is one program's run between its begin and end markers.
type section struct {
	Name   string
	Output string
	Status int  // exit status; -1 when it could not start or was killed
	Ended  bool // the end marker was seen
}

// parseConsole splits a console log at the init's markers. Kernel messages and
// firmware noise outside sections are ignored.
func parseConsole(console []byte) consoleLog {
	var log consoleLog
	var cur *section
	var out strings.Builder
	for _, line := range strings.Split(cleanConsole(console), "\n") {
		rest, isMark := strings.CutPrefix(line, vmproto.Prefix)
		if !isMark {
			if cur != nil {
				out.WriteString(line)
				out.WriteByte('\n')
			}
			continue
		}
		kind, arg, _ := strings.Cut(rest, " ")
		switch kind {
		case vmproto.Kernel:
			log.Release = arg
		case vmproto.Begin:
			log.Sections = append(log.Sections, section{Name: arg, Status: -1})
			cur = &log.Sections[len(log.Sections)-1]
			out.Reset()
		case vmproto.End:
			name, status, _ := strings.Cut(arg, " ")
			if cur != nil && cur.Name == name {
				cur.Output = out.String()
				cur.Status, _ = strconv.Atoi(status)
				cur.Ended = true
			}
			cur = nil
		case vmproto.Error:
			log.Errors = append(log.Errors, arg)
		case vmproto.Done:
			log.Done = true
		}
	}
	if cur != nil { // the VM stopped inside a section
		cur.Output = out.String()
	}
	return log
}

// TestRow is one test (or subtest) of a test binary.
type TestRow struct {
	Binary string `json:"binary"`
	Name   string `json:"name"`
	Status string `json:"status"` // pass, fail or skip
	// Reason: for skip, the skip message; for fail, the test's last output lines.
	Reason string `json:"reason,omitempty"`
}

var (
	// "--- PASS: TestX/sub (0.00s)", indented by 4 spaces per subtest level.
	resultLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(`)
	// "=== RUN   TestX", "=== CONT  TestX", "=== NAME  TestX", "=== PAUSE TestX".
	headerLine = regexp.MustCompile(`^=== (?:RUN|CONT|NAME|PAUSE)\s+(\S+)`)
)

// parseGoTest reads the output of a test binary run with -test.v. Output lines
// belong to the test named by the latest header; a result line closes a test and
// takes its log as the reason.
func parseGoTest(binary, output string) []TestRow {
	var rows []TestRow
	logs := map[string][]string{}
	current := ""
	for _, line := range strings.Split(output, "\n") {
		if m := headerLine.FindStringSubmatch(line); m != nil {
			current = m[1]
			continue
		}
		if m := resultLine.FindStringSubmatch(line); m != nil {
			row := TestRow{Binary: binary, Name: m[2], Status: strings.ToLower(m[1])}
			if row.Status != "pass" {
				row.Reason = lastLines(logs[m[2]], 6)
			}
			rows = append(rows, row)
			continue
		}
		if current != "" && strings.TrimSpace(line) != "" && line != "PASS" && line != "FAIL" {
			logs[current] = append(logs[current], strings.TrimSpace(line))
		}
	}
	// A parent that failed only through its subtests says so instead of nothing.
	for i, row := range rows {
		if row.Status == "fail" && row.Reason == "" {
			for _, sub := range rows {
				if sub.Status == "fail" && strings.HasPrefix(sub.Name, row.Name+"/") {
					rows[i].Reason = "a subtest failed"
					break
				}
			}
		}
	}
	return rows
}

func lastLines(lines []string, n int) string {
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
