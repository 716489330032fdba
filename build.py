#!/usr/bin/env python3
"""Maintainer entry point: `python build.py --help`. The work happens in the sglpatch package."""

import sys

try:
    from sglpatch.cli import main
except ImportError as exc:  # a missing dependency is an install step, not a crash
    name = getattr(exc, "name", None) or str(exc)
    print(f"error: cannot import {name} ({exc}): run `pip install -r requirements.txt`", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main())
