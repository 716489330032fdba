"""sglpatch.errors.UserError: every expected failure says what is wrong and what to do."""

from __future__ import annotations

import pytest

from sglpatch.errors import UserError


def test_a_user_error_reads_as_what_then_what_to_do():
    error = UserError("the pin names no wheel", "add one")
    assert str(error) == "the pin names no wheel: add one" and (error.what, error.hint) == (
        "the pin names no wheel",
        "add one",
    )
    assert error.keep_progress is False


@pytest.mark.parametrize("what, hint", [("", "add one"), ("no wheel", ""), (None, "x"), ("x", None)])
def test_an_error_without_both_parts_is_refused_where_it_is_made(what, hint):
    with pytest.raises(TypeError, match="needs what is wrong and what to do"):
        UserError(what, hint)
