"""What every stage entry point shares: logging set-up and clear, traceback-free errors."""
from __future__ import annotations

import argparse
import logging
import sys
from typing import Callable

from .errors import PipelineError


def stage_parser(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--params", default="params.yaml",
                    help="the params file to read (default: params.yaml)")
    return ap


def run_stage(main: Callable[[], None]) -> None:
    """Run ``main``; a :class:`PipelineError` becomes ``error: ...`` on stderr and exit 1."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        main()
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
