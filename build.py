#!/usr/bin/env python3
"""Maintainer entry point: `python build.py --help`. The work happens in the sglpatch package."""

import sys

try:
    from sglpatch.cli.main import main
except KeyboardInterrupt:  # Ctrl-C while Python loads the tool: nothing has started
    print("error: interrupted; nothing was lost: nothing had started", file=sys.stderr)
    sys.exit(130)
except ImportError as exc:  # a missing dependency or tool is an install step, not a crash
    if "git executable" in str(exc):
        print("error: the git program was not found on PATH: install git (e.g. apt-get install git)", file=sys.stderr)
    else:
        name = getattr(exc, "name", None) or str(exc)
        print(f"error: missing Python package {name}: run `pip install -r requirements.txt`", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main())
