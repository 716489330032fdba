"""`python -m sglpatch`: the same commands as `python build.py` and the `sglpatch` script."""

import sys

from sglpatch.cli.entry import console

sys.exit(console())
