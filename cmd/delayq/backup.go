package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/delayq/delayq/internal/store/pebblestore"
)

func init() {
	register("backup", "write an online backup of a server's embedded store (a tar archive; restore: extract it into an empty --data directory)", runBackup)
}

// runBackup writes the archive to a temporary file beside --out and
// renames it into place only when it arrived whole, so a cut connection
// never leaves a file that looks like a backup.
func runBackup(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLI("backup", "backup --out FILE [--server URL]", stdout, stderr)
	out := c.fs.String("out", "", "write the archive to this `file` (\"-\": stdout)")
	if _, code, ok := c.parse(args, 0, 0); !ok {
		return code
	}
	if *out == "" {
		return c.usageErr("--out is required (a file name, or - for stdout)")
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	if *out == "-" {
		if _, err := cl.Backup(ctx, stdout); err != nil {
			return c.fail(err)
		}
		return exitOK
	}
	if _, err := os.Stat(*out); err == nil {
		return c.usageErr("--out %s exists; refusing to overwrite a backup", *out)
	}
	tmp, err := os.CreateTemp(filepath.Dir(*out), "."+filepath.Base(*out)+".partial-*")
	if err != nil {
		return c.fail(err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // a no-op once renamed
	n, err := cl.Backup(ctx, tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), *out)
	}
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(stdout, "backup written to %s (%d bytes)\n", *out, n)
	return exitOK
}

func init() {
	register("restore", "extract a backup archive into an empty data directory and check that it opens (then start `delayq serve --data DIR`)", runRestore)
}

func runRestore(_ context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLI("restore", "restore --from FILE --data DIR", stdout, stderr)
	from := c.fs.String("from", "", "the archive `file` written by delayq backup (\"-\": stdin)")
	data := c.fs.String("data", "", "the data `directory` to create; must be missing or empty")
	if _, code, ok := c.parse(args, 0, 0); !ok {
		return code
	}
	if *from == "" || *data == "" {
		return c.usageErr("--from and --data are required")
	}
	var r io.Reader = os.Stdin
	if *from != "-" {
		f, err := os.Open(*from)
		if err != nil {
			return c.fail(err)
		}
		defer f.Close()
		r = f
	}
	info, err := pebblestore.Restore(r, *data)
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(stdout, "restored %d files (%d bytes) into %s\n", info.Files, info.Bytes, *data)
	return exitOK
}
