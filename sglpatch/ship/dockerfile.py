"""Reading docker/Dockerfile the way Docker does, for what the image plan needs from it: its
instructions, its ARGs (and their defaults) and its LABELs, with ``${ARG}`` substituted.
"""

from __future__ import annotations

import re
import shlex


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out, buf = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction are ignored by Docker
        if stripped.endswith("\\"):
            buf += stripped[:-1]
            continue
        buf += stripped
        keyword, _, rest = buf.partition(" ")
        out.append((keyword.upper(), rest.strip()))
        buf = ""
    return out


def dockerfile_arg_defaults(text: str) -> dict[str, str]:
    defaults = {}
    for keyword, rest in dockerfile_instructions(text):
        if keyword == "ARG":
            name, eq, value = rest.partition("=")
            if eq:
                defaults[name.strip()] = value.strip().strip('"')
    return defaults


def dockerfile_args(text: str) -> set[str]:
    return {rest.partition("=")[0].strip() for keyword, rest in dockerfile_instructions(text) if keyword == "ARG"}


def dockerfile_labels(text: str) -> dict[str, str]:
    labels = {}
    for keyword, rest in dockerfile_instructions(text):
        if keyword == "LABEL":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                labels[key] = value
    return labels


def substitute(value: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m.group(1) or m.group(2), ""), value)
