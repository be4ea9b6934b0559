"""A server scope as the catalog's search filters: the catalog ranks within the scope, so a
scope's search finds what the whole catalog's ranking holds for it, not only what its first
hits hold."""

from __future__ import annotations

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog, Policy, Tool, Toolkit
from toolcat.server.scope import Scope

TEAM = Scope("team", policy=Policy(deny=("tag:destructive",), allow=("files.write_file",)))
SCOPES = [
    Scope(toolkits=("files",)),
    Scope(toolkits=("files", "sqlite")),
    Scope(policy=Policy(deny=("*",), allow=("text.*", "time.day_of_week"))),
    Scope(tags=("read-only",), policy=Policy(deny=("toolkit:math",))),
    Scope(toolkits=("files", "sqlite", "math")).narrowed(TEAM),
    Scope(policy=Policy(deny=("tag:data",))).narrowed(Scope("bob", toolkits=("data", "text"))),
    Scope(any_tags=("math", "filesystem"), exclude_tags=("destructive",)),
    Scope(exclude_tags=("read-only",)).narrowed(Scope("eve", any_tags=("filesystem", "sql"))),
    Scope(any_tags=("time", "text")).narrowed(
        Scope("ann", tags=("read-only",), any_tags=("data", "text"))
    ),
]
VERSIONED = [
    Scope(toolkits=("files@1.0.0", "sqlite")),
    Scope(toolkits=("files@2", "text")),
    Scope(toolkits=("extra",)).narrowed(Scope("pinned", toolkits=("extra@2",))),
]
QUERIES = ["delete a file", "read a table from the database", "what day is it", "convert text"]


@pytest.fixture
def scoped(catalog: Catalog) -> Catalog:
    catalog.register(SAMPLE_TOOLKITS)
    extra = [
        Tool(name=f"read_record_{i}", description="Read a record from a file") for i in range(3)
    ]
    catalog.register(Toolkit(name="extra", version="1", tools=extra))
    catalog.register(Toolkit(name="extra", version="2", tools=extra))  # active: 2
    return catalog


def ids(catalog: Catalog, query: str, scope: Scope | None = None) -> list[str]:
    if scope is None:
        hits = catalog.search(query, mode="bm25", k=1000).hits
    else:
        hits = catalog.search(
            query,
            mode="bm25",
            k=1000,
            tags=scope.tag_filter,
            toolkit=scope.single_toolkit,
            policies=scope.search_policies,
        ).hits
    return [h.tool.id for h in hits]


@pytest.mark.parametrize("scope", SCOPES + VERSIONED, ids=repr)
def test_a_scope_filters_the_search_as_its_allows_does(scoped: Catalog, scope: Scope) -> None:
    tools = {t.id: t for t in scoped.iter_tools()}
    for _ in range(2):  # FTS5, then the in-memory index
        for query in QUERIES:
            everything = ids(scoped, query)
            within = ids(scoped, query, scope)
            wanted = [i for i in everything if scope.allows(tools[i])]
            if scope.exact_in_search:
                assert within == wanted, query
            else:  # a version is checked afterwards on a superset, ranked alike
                assert [i for i in within if scope.allows(tools[i])] == wanted, query


def test_only_versions_and_unusual_names_are_left_to_allows() -> None:
    assert all(scope.exact_in_search for scope in SCOPES)
    assert not any(scope.exact_in_search for scope in VERSIONED)
    assert not Scope(toolkits=("Files*",)).exact_in_search
    assert Scope(toolkits=("Files*",)).search_policies == ()  # never read as a pattern


def test_a_deny_all_scope_finds_what_its_toolkit_finds(scoped: Catalog) -> None:
    by_rules = Scope(policy=Policy(deny=("*",), allow=("sqlite.*",)))
    by_toolkit = Scope(toolkits=("sqlite",))
    for query in QUERIES:
        assert ids(scoped, query, by_rules) == ids(scoped, query, by_toolkit)


def test_refusals_name_the_level_whose_rule_refuses(sample_catalog: Catalog) -> None:
    """For the operator: the server's rules blame the server, a principal's its principal."""
    server = Scope(tags=(), policy=Policy.of(deny=["toolkit:sqlite"]))
    team = server.narrowed(
        Scope("data-team", toolkits=("files", "sqlite", "math"), tags=("filesystem",))
    )
    strict = server.narrowed(Scope("ops", policy=Policy.of(deny=["tag:destructive"])))
    sqlite = sample_catalog.get("sqlite.sqlite_query")
    math = sample_catalog.get("math.calculate")
    delete = sample_catalog.get("files.delete_file")
    text = sample_catalog.get("text.word_stats")
    assert "of this server" in (team.refusal(sqlite) or "")
    assert "principal 'data-team' requires" in (team.refusal(math) or "")
    assert "toolkits of principal 'data-team'" in (team.refusal(text) or "")
    assert "rule 'tag:destructive' of principal 'ops'" in (strict.refusal(delete) or "")
    assert "this server" not in (strict.refusal(delete) or "")


def test_short_names_within_a_scope_count_only_what_it_allows(
    scoped: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name is shortened unless another tool the scope allows has it, whether the SQL alone
    decides (an exact scope: no tool row is built) or ``allows`` checks each row (versions)."""
    from collections import Counter

    from toolcat.store import reader

    sample = list(scoped.iter_tools())
    mirrored = [Tool(name=t.name, description=t.description, tags=t.tags) for t in sample[::3]]
    scoped.register(Toolkit(name="mirror", version="1", tools=mirrored))
    tools = list(scoped.iter_tools())
    built = [0]
    row_to_tool = reader.row_to_tool

    def counted(row: tuple[object, ...]) -> object:
        built[0] += 1
        return row_to_tool(row)

    monkeypatch.setattr(reader, "row_to_tool", counted)
    for scope in [Scope(), *SCOPES, *VERSIONED]:
        inside = [t for t in tools if scope.allows(t)]
        names = Counter(t.name for t in inside)
        built[0] = 0
        shortened = scoped.short_names(inside, within=scope)
        assert shortened == {t.id: t.id if names[t.name] > 1 else t.name for t in inside}
        assert (built[0] == 0) == scope.exact_in_search, scope
    wide = scoped.short_names(tools, within=Scope())
    files = [t for t in tools if t.toolkit == "files"]
    assert any(wide[t.id] == t.id for t in files)  # a twin in mirror: not shortened
    narrow = scoped.short_names(files, within=Scope(toolkits=("files",)))
    assert all(narrow[t.id] == t.name for t in files)  # its twins are out of scope


def test_a_policy_given_lists_keys_the_servers_caches() -> None:
    """A library user writes ``Policy(deny=[...])`` as its docstring does: the server keys
    its resolved names (and lists) by the caller's scope, and an unhashable scope failed
    every call and every tools/list with a TypeError."""
    from toolcat.server.mcp import ResolvedTools

    listed = Policy(deny=["tag:destructive"], allow=["files.write_file"], guards=[])
    scope = Scope(policy=listed).narrowed(Scope("p", policy=Policy(deny=["toolkit:math"])))
    assert listed == Policy(deny=("tag:destructive",), allow=("files.write_file",))
    kept = ResolvedTools()
    tool = object()
    kept.keep(3, scope, "read_file", tool)  # type: ignore[arg-type]
    assert kept.get(3, scope, "read_file") is tool
