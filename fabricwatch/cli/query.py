"""``fabricwatch query``: forensic SQL over a fabricwatch DuckDB file."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from fabricwatch.cli.output import console
from fabricwatch.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "query",
        help="run forensic SQL on a DuckDB file",
        description="Run SQL on a fabricwatch DuckDB file, read-only, with its sealed Parquet segments. Tables: "
        "gpu, optical, port, switch, module, incidents, findings, deadletters, runbook_audit (DESIGN §5b). Works "
        "while a processor is writing the file (then only sealed data is visible).",
    )
    p.add_argument("sql", help="the SQL to run")
    p.add_argument("--db", type=Path, required=True, metavar="FILE", help="the DuckDB file")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")
    p.add_argument("--limit", type=int, default=1000, help="rows printed at most in table format (default 1000)")
    p.set_defaults(run=run)


READ_ONLY = ("SELECT", "EXPLAIN")  # DuckDB statement types that only read (WITH, FROM, SHOW, DESCRIBE: SELECT)
ALLOWED = "fabricwatch query runs only SELECT (WITH, FROM, SHOW, DESCRIBE, SUMMARIZE) and EXPLAIN"
_COMMENTS = re.compile(r"/\*.*?\*/|--[^\n]*", re.S)
_EXPLAIN = re.compile(r"^\s*(?:/\*.*?\*/\s*|--[^\n]*\n\s*)*explain\s+(?:analy[sz]e\s+)?(?:\([^)]*\)\s*)?", re.I | re.S)


def refuse_writes(sql: str) -> str | None:
    """Why ``sql`` may not run here (it writes, or changes the session), or None when it only reads.

    Forensic SQL runs beside a live processor: a statement that writes (INSERT, COPY ... TO, CREATE,
    ATTACH, INSTALL, ...) is refused before anything runs, each statement of a script checked, and
    ``EXPLAIN ANALYZE`` (which executes) is checked for what it explains.
    """
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error:
        return None  # not SQL at all: running it reports DuckDB's own parser error
    for statement in statements:
        kind = statement.type.name
        if kind == "EXPLAIN":
            inner = _EXPLAIN.sub("", statement.query, count=1)
            if inner != statement.query and (why := refuse_writes(inner)):
                return why
        elif kind not in READ_ONLY:
            word = re.search(r"[A-Za-z]+", _COMMENTS.sub("", statement.query))
            return f"refused: {word[0].upper() if word else kind} writes or changes the session; {ALLOWED}"
    return None


def run(args: argparse.Namespace) -> int:
    import duckdb

    if why := refuse_writes(args.sql):
        raise InputError("sql", why)

    from fabricwatch.stream.segments import open_forensic

    if not args.db.exists():
        raise InputError("--db", f"{args.db}: no such file")
    try:
        forensic = open_forensic(args.db)
    except duckdb.Error as exc:
        raise InputError("--db", f"cannot open {args.db}: {str(exc).splitlines()[0]}") from None
    if forensic.note:
        print(f"fabricwatch query: note: {forensic.note}", file=sys.stderr)
    con = forensic.con
    try:
        rel = con.sql(args.sql)
        if rel is None:
            return 0
        df = rel.df()
    except duckdb.Error as exc:
        raise InputError("sql", str(exc).splitlines()[0]) from None
    finally:
        con.close()
    if args.format == "csv":
        df.to_csv(sys.stdout, index=False)
    elif args.format == "json":
        sys.stdout.write(df.to_json(orient="records", date_format="iso", lines=True))
    else:
        from rich.table import Table

        table = Table(header_style="bold")
        for col in df.columns:
            table.add_column(str(col))
        for row in df.head(args.limit).itertuples(index=False):
            table.add_row(*("" if v is None else str(v) for v in row))
        console().print(table)
        if len(df) > args.limit:
            print(f"({len(df) - args.limit} more rows; use --limit or --format csv)", file=sys.stderr)
    return 0
