"""Helpers shared by the CLI command modules: catalog loading, JSON output, progress."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console

from gpucatalog.catalog import loader, model

err_console = Console(stderr=True)


def load(args: argparse.Namespace) -> model.Catalog:
    root = Path(args.catalog_dir) if getattr(args, "catalog_dir", None) else None
    return loader.load_catalog(root)


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


@contextmanager
def progress(message: str) -> Iterator[None]:
    """A spinner on a terminal; a plain line otherwise (CI logs, pipes)."""
    if err_console.is_terminal:
        with err_console.status(message):
            yield
    else:
        print(message, file=sys.stderr)
        yield


def add_subparser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str, examples: list[str]
) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        help=help,
        description=help[0].upper() + help[1:] + ".",
        epilog="examples:\n" + "\n".join(f"  {e}" for e in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
