package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/bookline/bookline/httpapi"
)

const hashKeySummary = `Prints the SHA-256 of an API key, the form --api-keys takes. The key is
read from the first line of stdin (never from the command line, where
other users could see it). With --new it makes a random key instead and
prints the key and its hash.`

func runHashKey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var newKey bool
	fs := newFlagSet("hash-key", stderr, hashKeySummary)
	fs.BoolVar(&newKey, "new", false, "make a new random key and print it with its hash")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if newKey {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		k := "bk_" + base64.RawURLEncoding.EncodeToString(b)
		fmt.Fprintf(stdout, "key:    %s\nsha256: %s\n", k, httpapi.HashKey(k))
		return nil
	}
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	k := strings.TrimRight(line, "\r\n")
	if k == "" {
		return errors.New("no key on stdin")
	}
	fmt.Fprintln(stdout, httpapi.HashKey(k))
	return nil
}
