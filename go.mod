module github.com/agentbox/agentbox

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/moby/sys/mountinfo v0.7.3
	golang.org/x/sys v0.50.0
)
