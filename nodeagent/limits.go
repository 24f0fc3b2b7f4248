package nodeagent

import (
	"fmt"
	"unicode/utf8"
)

// Limits on what a pod's spec can make the agent build or write.
const (
	// maxExpandedValue is the most bytes one $(VAR)-expanded env value,
	// command or args element may reach: 128 KiB, Linux's MAX_ARG_STRLEN.
	maxExpandedValue = 128 << 10
	// maxEnvBytes is the most bytes a container's environment
	// ("NAME=value" strings) and, separately, its command line may total:
	// 1 MiB each, so that both fit Linux's ARG_MAX of 2 MiB.
	maxEnvBytes = 1 << 20
	// maxMessageBytes is the most bytes of a message the agent writes into
	// a pod's status (container state messages, conditions) or an Event,
	// as events.k8s.io caps an Event's note at 1024 bytes.
	maxMessageBytes = 1024
	// maxLogBytes is how much of a spec-provided string (an image, an
	// error that quotes it) goes into one log line.
	maxLogBytes = 256
)

// truncateMessage returns s cut to at most maxMessageBytes bytes, ending
// with "..." when cut, on a UTF-8 boundary.
func truncateMessage(s string) string {
	if len(s) <= maxMessageBytes {
		return s
	}
	return cutUTF8(s, maxMessageBytes-3) + "..."
}

// logText returns s for a log line: whole when short, else its first
// maxLogBytes bytes and its length.
func logText(s string) string {
	if len(s) <= maxLogBytes {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", cutUTF8(s, maxLogBytes), len(s))
}

// cutUTF8 returns the longest prefix of s of at most n bytes that does not
// split a UTF-8 sequence.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
