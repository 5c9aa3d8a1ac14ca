package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/pgstore"
)

func init() {
	register("migrate", "create or upgrade the PostgreSQL schema or MySQL tables: migrate --postgres URL | --mysql URL", runMigrate)
}

const migrateUsage = `Usage: delayq migrate --postgres URL [--postgres-schema NAME]
       delayq migrate --mysql URL [--mysql-prefix PREFIX]

Creates delayq's schema in a PostgreSQL database, or upgrades it to this
build's version, then exits. 'delayq serve --postgres' does the same at
startup unless --postgres-migrate=false, so this is for deployments whose
servers run without the right to change the schema. Safe to run while
servers run and from several places at once (an advisory lock orders
them). The same holds for MySQL/MariaDB (--mysql; a named lock orders
them). Flags also read DELAYQ_POSTGRES, DELAYQ_POSTGRES_SCHEMA,
DELAYQ_MYSQL and DELAYQ_MYSQL_PREFIX.

Flags:
`

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("delayq migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	url := fs.String("postgres", os.Getenv("DELAYQ_POSTGRES"), "PostgreSQL `URL` (env DELAYQ_POSTGRES)")
	schema := fs.String("postgres-schema", envString("DELAYQ_POSTGRES_SCHEMA", pgstore.DefaultSchema), "`schema` of delayq's tables (env DELAYQ_POSTGRES_SCHEMA)")
	myURL := fs.String("mysql", os.Getenv("DELAYQ_MYSQL"), "MySQL/MariaDB `URL` (env DELAYQ_MYSQL)")
	prefix := fs.String("mysql-prefix", envString("DELAYQ_MYSQL_PREFIX", mysqlstore.DefaultPrefix), "`prefix` of delayq's MySQL tables (env DELAYQ_MYSQL_PREFIX)")
	timeout := fs.Duration("timeout", 10*time.Second, "time limit for connecting")
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, migrateUsage)
		printFlags(stdout, fs)
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "delayq migrate: %v (run 'delayq migrate -h')\n", err)
		return exitUsage
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "delayq migrate: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	case *url != "" && *myURL != "":
		fmt.Fprintln(stderr, "delayq migrate: give --postgres or --mysql, not both")
		return exitUsage
	case *url == "" && *myURL == "":
		fmt.Fprintln(stderr, "delayq migrate: --postgres URL or --mysql URL is required")
		return exitUsage
	}
	if *myURL != "" {
		from, to, err := mysqlstore.Migrate(ctx, mysqlstore.Options{URL: *myURL, Prefix: *prefix, Timeout: *timeout})
		if err != nil {
			fmt.Fprintf(stderr, "delayq migrate: %s: %v\n", mysqlstore.RedactURL(*myURL), err)
			return exitRequest
		}
		if from == to {
			fmt.Fprintf(stdout, "tables %s* are at version %d: nothing to do\n", *prefix, to)
		} else {
			fmt.Fprintf(stdout, "tables %s* migrated from version %d to %d\n", *prefix, from, to)
		}
		return exitOK
	}
	from, to, err := pgstore.Migrate(ctx, pgstore.Options{URL: *url, Schema: *schema, Timeout: *timeout})
	if err != nil {
		fmt.Fprintf(stderr, "delayq migrate: %s: %v\n", pgstore.RedactURL(*url), err)
		return exitRequest
	}
	if from == to {
		fmt.Fprintf(stdout, "schema %s is at version %d: nothing to do\n", *schema, to)
	} else {
		fmt.Fprintf(stdout, "schema %s migrated from version %d to %d\n", *schema, from, to)
	}
	return exitOK
}
