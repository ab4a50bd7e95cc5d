module github.com/agentbox/agentbox

go 1.26.0

require golang.org/x/sys v0.50.0

require github.com/moby/sys/mountinfo v0.7.3 // indirect
