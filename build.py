#!/usr/bin/env python3
"""Maintainer entry point: `python build.py --help`. The work happens in the sglpatch package."""

import sys

from sglpatch.cli.entry import main

if __name__ == "__main__":
    sys.exit(main())
