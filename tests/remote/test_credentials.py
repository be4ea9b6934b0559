import pytest

from toolcat.errors import ToolcatError
from toolcat.remote.credentials import (
    MissingSecretError,
    parse_assignments,
    references,
    resolve,
    resolve_all,
)


def test_references_are_resolved_from_the_environment_given():
    env = {"TOKEN": "s3cret", "USER": "ada"}
    assert resolve("Bearer ${TOKEN} for ${USER}", where="header", environ=env) == (
        "Bearer s3cret for ada"
    )
    assert references("${A} ${B} ${A} $${C}") == ["A", "B"]


def test_a_doubled_dollar_is_a_literal_reference():
    assert resolve("$${TOKEN}", where="header", environ={}) == "${TOKEN}"


def test_a_missing_variable_names_it_and_where_it_was_used():
    with pytest.raises(MissingSecretError, match=r"header 'Authorization'.*GITHUB_TOKEN"):
        resolve_all({"Authorization": "Bearer ${GITHUB_TOKEN}"}, kind="header", environ={})


def test_assignments_parse_and_refuse_malformed_items():
    assert parse_assignments(["A=1", "B=x=y", "C="], option="--env") == {
        "A": "1",
        "B": "x=y",
        "C": "",
    }
    with pytest.raises(ToolcatError, match="--header 'nope'"):
        parse_assignments(["nope"], option="--header")
