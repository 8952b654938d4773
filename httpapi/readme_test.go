package httpapi_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// readmeCommand is one command of the README's curl session and the status
// the README shows for it.
type readmeCommand struct {
	line   string
	status string
}

var shownStatus = regexp.MustCompile(`#\s*(\d{3})\b`)

// readmeSession reads the commands of the README's "A session with curl":
// lines that start with "$ " (continued by a trailing backslash), each
// with the first "# NNN" shown on it or on the answer lines after it (200
// when none is shown).
func readmeSession(t *testing.T) []readmeCommand {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "## A session with curl")
	if i < 0 {
		t.Fatal("README: no section \"A session with curl\"")
	}
	text = text[i:]
	start := strings.Index(text, "```sh\n")
	end := strings.Index(text[start+6:], "```")
	if start < 0 || end < 0 {
		t.Fatal("README: the curl session has no sh block")
	}
	var cmds []readmeCommand
	lines := strings.Split(text[start+6:start+6+end], "\n")
	for k := 0; k < len(lines); k++ {
		l := lines[k]
		if !strings.HasPrefix(l, "$ ") {
			if len(cmds) > 0 && cmds[len(cmds)-1].status == "" {
				if m := shownStatus.FindStringSubmatch(l); m != nil {
					cmds[len(cmds)-1].status = m[1]
				}
			}
			continue
		}
		cmd := strings.TrimPrefix(l, "$ ")
		for strings.HasSuffix(cmd, "\\") && k+1 < len(lines) {
			k++
			cmd = strings.TrimSuffix(cmd, "\\") + " " + strings.TrimSpace(lines[k])
		}
		c := readmeCommand{line: cmd}
		if j := strings.Index(cmd, " # "); j >= 0 && !strings.Contains(cmd[j:], "'") {
			if m := shownStatus.FindStringSubmatch(cmd[j:]); m != nil {
				c.status = m[1]
			}
		}
		cmds = append(cmds, c)
	}
	for k := range cmds {
		if cmds[k].status == "" {
			cmds[k].status = "200"
		}
	}
	return cmds
}

// TestREADMECurlSession runs the README's curl session, as a reader would
// paste it, against a real bookline, and checks each status it shows.
func TestREADMECurlSession(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
	cmds := readmeSession(t)
	if len(cmds) < 5 {
		t.Fatalf("README: %d commands in the curl session", len(cmds))
	}
	h := start(t, "", options{})
	host := strings.TrimPrefix(h.URL, "http://")
	dir := t.TempDir()
	for _, c := range cmds {
		line := strings.ReplaceAll(c.line, "localhost:8080", host)
		if !strings.Contains(line, "curl -s ") {
			t.Fatalf("README command without curl -s: %s", c.line)
		}
		// The status, on stderr, apart from what the reader sees.
		line = strings.Replace(line, "curl -s ", "curl -s -w '%{stderr}%{http_code}' ", 1)
		cmd := exec.Command("bash", "-c", line)
		cmd.Dir = dir
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s%s", c.line, err, out, stderr.String())
		}
		if got := strings.TrimSpace(stderr.String()); got != c.status {
			t.Errorf("%s\nanswered %s %s, the README shows %s", c.line, got, out, c.status)
		}
	}
}
