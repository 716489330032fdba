"""The pin file (`upstream.toml`): its schema, one-line errors naming file, line and key, PEP 440
versions, and rewriting it without losing its layout."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
from helpers import REPO_ROOT, assert_one_line_error, make_project, run_cli

from sglpatch.errors import UserError
from sglpatch.upstream.pin import Artifact, Pin, bare_pin_text, read_pin, render_pin, same_version, write_pin

# Every key the schema knows, one per line, so that each case below names its line.
PIN = """\
# a test pin
[upstream]
repo = "https://example.invalid/sglang"
version = "1.0.0"
tag = "v1.0.0"
commit = "0123456789abcdef0123456789abcdef01234567"

[upstream.artifacts.sdist]
filename = "sglang-1.0.0.tar.gz"
sha256 = "1111111111111111111111111111111111111111111111111111111111111111"

[upstream.artifacts.wheel-cp312]
filename = "sglang-1.0.0-cp312-cp312-manylinux_2_34_x86_64.whl"
sha256 = "2222222222222222222222222222222222222222222222222222222222222222"

[series]
local = "kimi"
release = 3
checks = ["eagle3-capture-wiring"]

[series.accepted]
"Model.member" = "why it is accepted"

[image]
flashinfer = "0.7.2"
"""


def write(tmp_path, text: str):
    (tmp_path / "upstream.toml").write_text(text)
    return tmp_path


def pin_error(tmp_path, text: str) -> str:
    with pytest.raises(UserError) as caught:
        read_pin(write(tmp_path, text))
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(tmp_path / "upstream.toml")), message
    return message


def test_the_test_pin_is_valid(tmp_path):
    pin = read_pin(write(tmp_path, PIN))
    assert (pin.version, pin.tag, pin.series_local, pin.series_release) == ("1.0.0", "v1.0.0", "kimi", 3)
    assert [a.kind for a in pin.artifacts] == ["sdist", "wheel-cp312"]
    assert pin.required_checks == ("eagle3-capture-wiring",)
    assert pin.accepted == (("Model.member", "why it is accepted"),)
    assert pin.image_flashinfer == "0.7.2"


# (what is checked, the line it is on, the text made invalid, its valid twin, what the error says)
CASES = [
    (
        "version",
        'version = "1.0.0"',
        'version = "one"',
        'version = "1.0"',
        ":4: [upstream] version: 'one' is not a PEP 440 version",
    ),
    (
        "version-local",
        'version = "1.0.0"',
        'version = "1.0.0+x"',
        'version = "1.0.0.0"',
        ":4: [upstream] version: '1.0.0+x' has a local label",
    ),
    (
        "version-type",
        'version = "1.0.0"',
        "version = 1.0",
        'version = "1.0"',
        ":4: [upstream] version: is a float (1.0), not a string",
    ),
    (
        "repo-missing",
        'repo = "https://example.invalid/sglang"\n',
        "",
        'repo = "ssh://git@example.invalid/sglang"\n',
        ":2: [upstream] repo: is missing",
    ),
    (
        "tag-version",
        'tag = "v1.0.0"',
        'tag = "v1.0.1"',
        'tag = "1.0.0"',
        ":5: [upstream] tag: 'v1.0.1' is not the tag of version 1.0.0",
    ),
    (
        "tag-name",
        'tag = "v1.0.0"',
        'tag = "v 1.0.0"',
        'tag = "v1.0.0.0"',
        ":5: [upstream] tag: 'v 1.0.0' is not a git tag name",
    ),
    (
        "commit",
        'commit = "0123456789abcdef0123456789abcdef01234567"',
        'commit = "0123abc"',
        'commit = ""',
        ":6: [upstream] commit: '0123abc' is not empty or 40 hex digits",
    ),
    ("sha256", 'sha256 = "1111', 'sha256 = "x111', 'sha256 = "A111', ":10: [upstream.artifacts.sdist] sha256: 'x111"),
    (
        "filename",
        'filename = "sglang-1.0.0.tar.gz"',
        'filename = "dist/sglang-1.0.0.tar.gz"',
        'filename = "sglang-1.0.0.post0.tar.gz"',
        ":9: [upstream.artifacts.sdist] filename: 'dist/sglang-1.0.0.tar.gz' is not a plain file name",
    ),
    (
        "filename-kind",
        'filename = "sglang-1.0.0.tar.gz"',
        'filename = "sglang-1.0.0-py3-none-any.whl"',
        'filename = "sglang-1.0.0.tar.gz"',
        ":9: [upstream.artifacts.sdist] filename: 'sglang-1.0.0-py3-none-any.whl' is not an sdist (no .tar.gz)",
    ),
    (
        "filename-kind-wheel",
        'filename = "sglang-1.0.0-cp312-cp312-manylinux_2_34_x86_64.whl"',
        'filename = "sglang-1.0.0.tar.gz"',
        'filename = "sglang-1.0.0-cp312-cp312-manylinux_2_34_x86_64.whl"',
        ":13: [upstream.artifacts.wheel-cp312] filename: 'sglang-1.0.0.tar.gz' is not a wheel-cp312 (no .whl)",
    ),
    (
        "artifact-kind",
        "[upstream.artifacts.wheel-cp312]",
        "[upstream.artifacts.wheel-py3]",
        "[upstream.artifacts.wheel-cp313]",
        ":12: [upstream.artifacts] wheel-py3: is not an artifact kind",
    ),
    (
        "artifact-missing-key",
        'sha256 = "2222222222222222222222222222222222222222222222222222222222222222"\n',
        "",
        'sha256 = "2222222222222222222222222222222222222222222222222222222222222222"\n',
        ":12: [upstream.artifacts.wheel-cp312] sha256: is missing",
    ),
    (
        "unknown-key",
        "release = 3",
        "relaese = 3",
        "release = 3",
        ":18: [series] relaese: is not a known key: did you mean 'release'?",
    ),
    ("unknown-table", "[image]", "[images]", "[image]", ":24: images: is not a known key: did you mean 'image'?"),
    (
        "release-string",
        "release = 3",
        'release = "3"',
        "release = 4",
        ':18: [series] release: is a string ("3"), not an integer',
    ),
    (
        "release-bool",
        "release = 3",
        "release = true",
        "release = 1",
        ":18: [series] release: is a boolean (true), not an integer",
    ),
    ("release-zero", "release = 3", "release = 0", "release = 1", ":18: [series] release: 0 is not a positive integer"),
    (
        "local",
        'local = "kimi"',
        'local = "kimi fork"',
        'local = "kimi.fp8"',
        ":17: [series] local: 'kimi fork' is not a PEP 440 local version label",
    ),
    (
        "local-table",
        'local = "kimi"',
        'local = {name = "kimi"}',
        'local = "kimi_2"',
        ":17: [series] local: is a table, not a string",
    ),
    (
        "checks-type",
        'checks = ["eagle3-capture-wiring"]',
        'checks = "eagle3-capture-wiring"',
        "checks = []",
        ':19: [series] checks: is a string ("eagle3-capture-wiring"), not an array',
    ),
    (
        "checks-item",
        'checks = ["eagle3-capture-wiring"]',
        'checks = [\n  "eagle3-capture-wiring",\n  2,\n]',
        'checks = [\n  "eagle3-capture-wiring",\n  "x",\n]',
        ":19: [series] checks: holds 2, which is not a check name",
    ),
    (
        "accepted",
        '"Model.member" = "why it is accepted"',
        '"Model.member" = 1',
        '"Model.member" = "1"',
        ':22: [series.accepted] "Model.member": is an integer (1), not a string',
    ),
    (
        "flashinfer",
        'flashinfer = "0.7.2"',
        'flashinfer = "latest"',
        'flashinfer = "0.7.2.post1"',
        ":25: [image] flashinfer: 'latest' is not a PEP 440 version",
    ),
    (
        "flashinfer-spaces",
        'flashinfer = "0.7.2"',
        'flashinfer = " 0.7.2"',
        'flashinfer = "0.7.2"',
        ":25: [image] flashinfer: ' 0.7.2' has spaces around it",
    ),
    (
        "version-date",
        'version = "1.0.0"',
        "version = 1979-05-27",
        'version = "1.0.0"',
        ':4: [upstream] version: is a date ("1979-05-27"), not a string',
    ),
    (
        "tag-not-a-version",
        'tag = "v1.0.0"',
        'tag = "release-one"',
        'tag = "v1.0"',
        ":5: [upstream] tag: 'release-one' is not the tag of version 1.0.0",
    ),
    (
        "unknown-key-capitals",
        'repo = "https',
        'Repo = "https',
        'repo = "https',
        ":3: [upstream] Repo: is not a known key: did you mean 'repo'? remove it",
    ),
    (
        "unknown-key-no-guess",
        "release = 3",
        "release = 3\nzzz = 3",
        "release = 3",
        ":19: [series] zzz: is not a known key: remove it or use one of local, release,",
    ),
]


@pytest.mark.parametrize("old, bad, good, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_key_is_validated_with_file_line_and_key(tmp_path, old, bad, good, expected):
    assert old in PIN
    message = pin_error(tmp_path, PIN.replace(old, bad, 1))
    assert f"{tmp_path / 'upstream.toml'}{expected}" in message
    assert message.split(expected, 1)[1].strip()  # then what to do
    read_pin(write(tmp_path, PIN.replace(old, good, 1)))  # the valid twin


def test_a_key_without_a_line_is_named_by_table_and_key(tmp_path):
    # A table split over the file has no single line in tomlkit: the table and key still say where.
    message = pin_error(tmp_path, PIN + "\n[upstream.extra]\nx = 1\n")
    assert "upstream.toml:27: [upstream] extra: is not a known key" in message
    message = pin_error(tmp_path, PIN.replace("[series]\n", '[series]\nlocal = "a"\n', 1))
    assert "upstream.toml" in message and "[series]" not in message  # a duplicate key: tomlkit's words
    assert 'Key "local" already exists' in message and message.endswith(": fix the pin file")


def test_invalid_utf8_names_the_line(tmp_path):
    (tmp_path / "upstream.toml").write_bytes(PIN.encode().replace(b'"kimi"', b'"k\xffmi"'))
    with pytest.raises(UserError, match=r"upstream.toml:17: not valid UTF-8 \(byte 0xff\): save the pin file as UTF-8"):
        read_pin(tmp_path)
    write(tmp_path, PIN.replace('"kimi"', '"kimi"  # ünïcode comments are fine'))
    assert read_pin(tmp_path).series_local == "kimi"


def test_toml_syntax_error_names_the_line(tmp_path):
    message = pin_error(tmp_path, PIN.replace("release = 3", "release = [3"))
    assert "upstream.toml:19: not valid TOML (" in message and "line 19 col" in message


def test_errors_reach_the_user_as_one_line(tmp_path):
    root = make_project(tmp_path / "p", {})
    write(root, PIN.replace("release = 3", 'release = "3"'))
    assert_one_line_error(run_cli(root, "lines"), "upstream.toml:18: [series] release", "not an integer")
    (root / "upstream.toml").write_bytes(PIN.encode().replace(b'"kimi"', b'"k\xe9mi"'))
    assert_one_line_error(run_cli(root, "lines"), "upstream.toml:17: not valid UTF-8")
    write(root, PIN.replace("[series]", "[series"))
    assert_one_line_error(run_cli(root, "lines"), "upstream.toml:16: not valid TOML")
    write(root, PIN)
    assert run_cli(root, "lines").returncode == 0


@pytest.mark.parametrize("line", [".", "lines/latest"])
def test_the_real_pins_validate_and_render_unchanged(line):
    root = REPO_ROOT / line
    pin = read_pin(root)
    assert render_pin(root, pin) == (root / "upstream.toml").read_text()


def test_write_pin_moves_the_release_and_keeps_the_rest(tmp_path):
    pin = read_pin(write(tmp_path, PIN))
    moved = pin.with_release("1.1.0", "v1.1.0", None, (Artifact("wheel", "sglang-1.1.0-py3-none-any.whl", "3" * 64),))
    write_pin(tmp_path, moved)
    text = (tmp_path / "upstream.toml").read_text()
    assert read_pin(tmp_path) == moved and moved.series_release == 1
    assert text.startswith("# a test pin\n") and '"Model.member" = "why it is accepted"' in text
    assert 'commit = ""' in text and "sdist" not in text


def test_render_pin_refuses_what_would_not_read_back(tmp_path):
    pin = read_pin(write(tmp_path, PIN))
    broken = pin.with_release("1.1.0", "v1.1.0", None, (Artifact("sdist", "sglang-1.1.0.tar.gz", "nope"),))
    with pytest.raises(
        UserError,
        match=rf"^{tmp_path / 'upstream.toml'}:\d+: \[upstream.artifacts.sdist\] sha256: "
        "'nope' is not 64 hex digits",
    ):
        render_pin(tmp_path, broken)
    assert (tmp_path / "upstream.toml").read_text() == PIN


def test_versions_compare_as_pep440(tmp_path):
    assert same_version("0.5.9.0", "0.5.9") and same_version("v0.5.9", "0.5.9")
    assert not same_version("0.5.9", "0.5.9.post1")
    with pytest.raises(UserError, match="'main' is not a PEP 440 version"):
        same_version("main", "0.5.9")
    pin = read_pin(write(tmp_path, PIN))
    padded = dataclasses.replace(pin, version="1.0.0.0")
    assert pin == padded and hash(pin) == hash(padded) and pin.is_version("1.0")
    assert pin != dataclasses.replace(pin, version="1.0.1")
    assert pin == dataclasses.replace(pin, image_flashinfer="0.7.2.0")
    with pytest.raises(UserError, match="not a PEP 440 version"):
        pin.with_release("banana", "vbanana", None, ())


def test_missing_pin_file(tmp_path):
    with pytest.raises(UserError, match="no pin file"):
        read_pin(tmp_path)


# Only what the schema requires: everything else takes its default.
MINIMAL = """\
[upstream]
repo = "https://example.invalid/sglang"
version = "1.0.0"
tag = "v1.0.0"
"""


def test_a_pin_with_only_the_required_keys_takes_the_defaults(tmp_path):
    pin = read_pin(write(tmp_path, MINIMAL))
    assert pin == Pin(repo="https://example.invalid/sglang", version="1.0.0", tag="v1.0.0", commit=None)
    assert (pin.repo, pin.commit, pin.artifacts, pin.series_local, pin.series_release) == (
        "https://example.invalid/sglang",
        None,
        (),
        "kimi",
        1,
    )
    assert (pin.required_checks, pin.accepted, pin.image_flashinfer, pin.changelog) == ((), (), None, True)
    assert pin.local_version == "1.0.0+kimi.1"
    off = read_pin(write(tmp_path, MINIMAL + "[series]\nchangelog = false\n"))
    assert off.changelog is False and off.series_local == "kimi"  # its twin: the key is read


def test_hex_is_read_in_lower_case(tmp_path):
    pin = read_pin(write(tmp_path, PIN.replace("0123456789abcdef", "0123456789ABCDEF").replace("1111", "AAAA")))
    assert pin.commit == "0123456789abcdef0123456789abcdef01234567"
    assert pin.artifact("sdist").sha256 == "a" * 64


def test_render_pin_adds_the_tables_a_minimal_pin_lacks(tmp_path):
    write(tmp_path, MINIMAL)
    pin = read_pin(tmp_path).with_release(
        "1.1.0", "v1.1.0", "f" * 40, (Artifact("sdist", "sglang-1.1.0.tar.gz", "3" * 64),)
    )
    write_pin(tmp_path, pin)
    assert read_pin(tmp_path) == pin and read_pin(tmp_path).commit == "f" * 40
    text = (tmp_path / "upstream.toml").read_text()
    assert "[upstream.artifacts.sdist]\nfilename" in text and "[upstream.artifacts]" not in text
    assert text.endswith('[series]\nlocal = "kimi"\nrelease = 1\n')
    write_pin(tmp_path, pin.with_release("1.2.0", "v1.2.0", None, ()))  # no artifacts: no empty table either
    assert "artifacts" not in (tmp_path / "upstream.toml").read_text()


def test_the_pin_object(tmp_path):
    pin = read_pin(write(tmp_path, PIN))
    assert pin.artifact("wheel-cp312").filename.endswith("cp312-manylinux_2_34_x86_64.whl")
    assert pin.artifact("sdist").filename == "sglang-1.0.0.tar.gz" and pin.artifact("wheel") is None
    both = dataclasses.replace(
        pin, artifacts=(*pin.artifacts, Artifact("wheel", "sglang-1.0.0-py3-none-any.whl", "4" * 64))
    )
    assert [a.kind for a in both.wheels] == ["wheel", "wheel-cp312"]
    assert pin.with_release("1.1.0", "v1.1.0", "e" * 40, ()).commit == "e" * 40
    assert read_pin(write(tmp_path, PIN.replace('local = "kimi"', 'local = "Kimi.FP8"'))).series_local == "Kimi.FP8"
    assert pin != dataclasses.replace(pin, image_flashinfer="0.7.3")
    with pytest.raises(UserError, match="'nightly' is not a PEP 440 version: name an SGLang release"):
        dataclasses.replace(pin, image_flashinfer="nightly")


def test_a_table_split_over_the_file_is_named_without_a_line(tmp_path):
    # [upstream] only through [upstream.artifacts.sdist]: tomlkit gives the table no line of its own
    text = '[upstream.artifacts.sdist]\nfilename = "sglang-1.0.0.tar.gz"\nsha256 = "' + "1" * 64 + '"\n'
    message = pin_error(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'upstream.toml'}: [upstream] repo: is missing: write the upstream")


def test_every_read_error_says_what_to_do(tmp_path):
    def error(root):
        with pytest.raises(UserError) as caught:
            read_pin(root)
        return caught.value

    assert error(tmp_path).hint == "run from the repository root"
    (tmp_path / "patches").mkdir()
    missing = error(tmp_path)
    assert "the line lists patches but not the release" in missing.what
    assert missing.hint == f"restore it (`git -C {tmp_path} checkout -- upstream.toml`)"
    write(tmp_path, PIN.replace("[series]", "[series"))
    assert error(tmp_path).hint == "fix the syntax there"
    (tmp_path / "upstream.toml").write_bytes(b"\n\n" + PIN.encode().replace(b'"kimi"', b'"k\xffmi"'))
    bad = error(tmp_path)
    assert bad.what.endswith("upstream.toml:19: not valid UTF-8 (byte 0xff)") and bad.hint
    with pytest.raises(UserError) as caught:
        same_version("main", "0.5.9")
    assert caught.value.hint == "name an SGLang release such as 0.5.9"


def test_the_pin_is_written_as_utf8_whatever_the_locale(tmp_path):
    # an operator's shell in the POSIX locale: Python's default encoding is then ASCII
    write(tmp_path, PIN.replace('"why it is accepted"', '"pourquoi: déjà vu"'))
    env = {
        **os.environ,
        "LC_ALL": "C",
        "LANG": "C",
        "PYTHONUTF8": "0",
        "PYTHONCOERCECLOCALE": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    script = (
        "import sys; from pathlib import Path; from sglpatch.upstream.pin import read_pin, write_pin; "
        "root = Path(sys.argv[1]); pin = read_pin(root); "
        "write_pin(root, pin.with_release('1.1.0', 'v1.1.0', None, ()))"
    )
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert '"pourquoi: déjà vu"' in (tmp_path / "upstream.toml").read_bytes().decode("utf-8")


def test_a_bare_pin_carries_nothing_of_another_line(tmp_path):
    artifacts = (
        Artifact("sdist", "sglang-1.0.0.tar.gz", "a" * 64),
        Artifact("wheel", "sglang-1.0.0-py3-none-any.whl", "b" * 64),
    )
    text = bare_pin_text(tmp_path / "upstream.toml", "https://example.invalid/sglang", "1.0.0", artifacts, "exp")
    assert text == BARE
    empty = bare_pin_text(tmp_path / "upstream.toml", "https://example.invalid/sglang", "1.0.0", (), "exp")
    assert "artifacts" not in empty and read_pin(write(tmp_path, empty)).artifacts == ()
    pin = read_pin(write(tmp_path, text))
    assert (pin.series_local, pin.series_release, pin.required_checks, pin.accepted, pin.changelog) == (
        "exp",
        1,
        (),
        (),
        False,
    )
    with pytest.raises(UserError, match=f"^{tmp_path / 'upstream.toml'}:12: \\[upstream.artifacts.sdist\\] sha256"):
        bare_pin_text(
            tmp_path / "upstream.toml",
            "https://example.invalid/sglang",
            "1.0.0",
            (Artifact("sdist", "sglang-1.0.0.tar.gz", "nope"),),
            "exp",
        )


BARE = """\
# A bare line's pin (`lines --add --bare`): SGLang 1.0.0 with a series of its own.
# Moved by `rebase --onto VERSION`; verified against the sha256 below on every use.

[upstream]
repo = "https://example.invalid/sglang"
version = "1.0.0"
tag = "v1.0.0"
commit = ""

[upstream.artifacts.sdist]
filename = "sglang-1.0.0.tar.gz"
sha256 = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

[upstream.artifacts.wheel]
filename = "sglang-1.0.0-py3-none-any.whl"
sha256 = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

[series]
local = "exp"
release = 1
checks = []
# true: rebases of this line add entries to the repository's CHANGELOG.md
changelog = false
"""
