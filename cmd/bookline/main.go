package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

func main() {
	os.Exit(Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

type subcommand struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var subcommands = map[string]subcommand{
	"bench":            {"load-test a server speaking the booking API, then audit it (uniform, hot, mixed, collective, import)", runBench},
	"serve":            {"run the booking service (embedded NATS by default)", runServe},
	"import":           {"publish bookings from a CSV, NDJSON or ICS file and wait for their outcomes", runImport},
	"replay":           {"rebuild an index from the command stream (or a snapshot and the stream after it) into a new directory", runReplay},
	"snapshot":         {"take an index snapshot on a running server now, or list the stored ones", runSnapshot},
	"skip":             {"skip the command a partition is stopped at (a schema version this build does not know)", runSkip},
	"verify":           {"compare a live index with a fresh replay of the stream", runVerify},
	"nats-credentials": {"print the credentials of an embedded NATS role (importer, admin) for its clients", runNATSCredentials},
	"secrets-key":      {"make the key file that --secrets-key-file takes (instances sharing NATS need the same)", runSecretsKey},
	"hash-key":         {"print the SHA-256 of an API key read from stdin (or make a new key) for --api-keys", runHashKey},
}

// errUsage is returned after a usage message was printed.
var errUsage = errors.New("usage")

// Main runs bookline with args (without the program name) and returns the
// process exit code. SIGINT and SIGTERM cancel ctx.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sc, ok := subcommands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "bookline: unknown subcommand %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	if err := sc.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if !errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "bookline %s: %v\n", args[0], err)
		}
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: bookline <subcommand> [flags]")
	fmt.Fprintln(w, "\nsubcommands:")
	names := make([]string, 0, len(subcommands))
	for n := range subcommands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-16s %s\n", n, subcommands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'bookline <subcommand> --help' for its flags.")
}

// newFlagSet makes a flag set whose flags also read BOOKLINE_<NAME>
// environment variables (dashes become underscores). Precedence: command
// line, then environment, then the default.
func newFlagSet(name string, stderr io.Writer, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet("bookline "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: bookline %s [flags]\n\n%s\n\nflags (each also settable as the environment variable shown):\n", name, summary)
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" {
				def = fmt.Sprintf(" (default %q)", f.DefValue)
			}
			fmt.Fprintf(stderr, "  --%s\t[%s]\n      %s%s\n", f.Name, envName(f.Name), f.Usage, def)
		})
	}
	return fs
}

func envName(flagName string) string {
	return "BOOKLINE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args, then fills every flag not given on the command
// line from its environment variable.
func parseFlags(fs *flag.FlagSet, args []string) error {
	return parseFlagsWithConfig(fs, args, "")
}

// parseFlagsWithConfig is parseFlags with an optional configuration file
// named by the flag configFlag (or its environment variable). Precedence:
// command line, then environment, then the file, then the default. The
// file is a JSON object whose keys are flag names; a key that is not a
// flag is an error.
func parseFlagsWithConfig(fs *flag.FlagSet, args []string, configFlag string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(envName(f.Name)); ok && !set[f.Name] && err == nil {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", envName(f.Name), v, e)
			}
			set[f.Name] = true
		}
	})
	if err != nil || configFlag == "" {
		return err
	}
	path := fs.Lookup(configFlag).Value.String()
	if path == "" {
		return nil
	}
	vals, err := readConfigFile(path)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(vals))
	for k := range vals {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if k == configFlag || fs.Lookup(k) == nil {
			return fmt.Errorf("config file %s: unknown key %q (keys are flag names without the dashes, e.g. \"http-addr\")", path, k)
		}
		if set[k] {
			continue // the command line or the environment wins
		}
		if e := fs.Set(k, vals[k]); e != nil {
			return fmt.Errorf("config file %s: %q: %w", path, k, e)
		}
	}
	return nil
}

// readConfigFile reads a JSON object of flag values: strings, numbers and
// booleans (durations as strings, e.g. "5s").
func readConfigFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("config file %s: want a JSON object of flag names to values: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("config file %s: trailing data after the JSON object", path)
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		var x any
		d := json.NewDecoder(bytes.NewReader(v))
		d.UseNumber()
		if err := d.Decode(&x); err != nil {
			return nil, fmt.Errorf("config file %s: %q: %w", path, k, err)
		}
		switch t := x.(type) {
		case string:
			out[k] = t
		case json.Number:
			out[k] = t.String()
		case bool:
			out[k] = fmt.Sprint(t)
		default:
			return nil, fmt.Errorf("config file %s: %q: want a string, number or boolean", path, k)
		}
	}
	return out, nil
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}
