"""Options several commands share (``--json``, the tag filters) and the catalog the global
options name."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..catalog import Catalog
from ..errors import PolicyError
from ..policy.rules import Policy
from .output import echo

if TYPE_CHECKING:
    pass

F = TypeVar("F", bound=Callable[..., Any])


def json_option(fn: F) -> F:
    """``--json``: print JSON, errors included (``{"error": {"code", "message"}}`` on stdout
    besides the line on stderr)."""

    def remember(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        ctx.meta["toolcat.json"] = value
        return value

    return click.option(
        "--json", "as_json", is_flag=True, callback=remember, help="Print JSON (errors too)."
    )(fn)


def tag_options(fn: F) -> F:
    """``--tag`` (all of), ``--any-tag`` (at least one of), ``--exclude-tag`` (none of): the
    one tag rule of ``TagFilter``, each repeatable."""
    options = [
        click.option(
            "--tag", "tags", multiple=True, help="Only tools with this tag (repeat: all)."
        ),
        click.option(
            "--any-tag", "any_tags", multiple=True, help="Only tools with one of these tags."
        ),
        click.option(
            "--exclude-tag", "exclude_tags", multiple=True, help="Leave out tools with this tag."
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def open_catalog(ctx: click.Context, isolation: str = "thread", *, create: bool = False) -> Catalog:
    """The catalog the global options name; ``--isolate`` overrides ``isolation``. Only the
    commands that create a catalog (``init``, ``register``) pass ``create``: any other
    command on a missing file (a mistyped ``--db``) is an error naming the path."""
    params = ctx.find_root().params
    policy = Policy.of(allow=params.get("allow") or (), deny=params.get("deny") or ())
    mode: Any = params.get("isolate") or isolation
    catalog = Catalog(
        params.get("db"),
        policy=policy,
        isolation=mode,
        trust_any_module=bool(params.get("trust_any_module")),
        create=create,
    )
    ctx.call_on_close(catalog.close)
    if policy.allow or policy.deny:
        check_policy(catalog, policy)
    return catalog


def check_policy(catalog: Catalog, policy: Policy, where: str = "") -> None:
    """Refuse rules meant as a tag or toolkit; warn on stderr of rules matching no tool."""
    try:
        warnings = catalog.check_policy(policy)
    except PolicyError as e:
        raise PolicyError(f"{where}{e}") from e
    for warning in warnings:
        echo(f"warning: {where}{warning}", err=True)
