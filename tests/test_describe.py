"""describe(): what runs where, as rows a program can read and a table a person can."""

from __future__ import annotations

import random
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

import aspecthook as ah
from aspecthook import Aspect, after
from aspecthook.errors import InvalidOptionError

ROW_FIELDS = (
    "joinpoint",
    "stage",
    "order",
    "advice",
    "priority",
    "aspect",
    "filters",
    "location",
    "status",
)


@pytest.fixture
def point(request: pytest.FixtureRequest) -> str:
    """A join point name that no other test uses."""
    return "test_describe." + re.sub(r"\W", "_", request.node.name)


def _declare(weaver: ah.Weaver, name: str) -> Any:
    @weaver.joinpoint(name)
    def step(x: int = 1) -> int:
        return x

    return step


def _where(fn: Callable[..., Any]) -> str:
    code = fn.__code__
    return f"{code.co_filename}:{code.co_firstlineno}"


def test_rows_have_the_documented_fields(weaver: ah.Weaver, point: str) -> None:
    """A row has join point, stage, order, advice, priority, aspect, filters, location, status."""
    step = _declare(weaver, point)

    def warmup(ctx: Any) -> None:
        pass

    weaver.before(point, priority="high", every=10)(warmup)
    (row,) = ah.describe(point)
    assert isinstance(row, ah.Row)
    assert set(ROW_FIELDS) <= set(row.as_dict())
    assert row.joinpoint == point
    assert row.stage == "before"
    assert row.order == 1
    assert row.advice == "warmup"
    assert row.priority == 30
    assert row.aspect == ""
    assert row.filters == "every=10"
    assert row.location == _where(warmup)
    assert row.status == "active"
    assert step() == 1


def test_rows_list_advice_in_run_order_per_stage(weaver: ah.Weaver, point: str) -> None:
    """Within each stage, rows come in the order the advice runs, numbered from 1."""
    step = _declare(weaver, point)
    weaver.before(point, name="late", priority="low")(lambda ctx: None)
    weaver.before(point, name="first", priority="highest")(lambda ctx: None)
    weaver.before(point, name="middle")(lambda ctx: None)
    weaver.after(point, name="after-a")(lambda ctx: None)
    weaver.after(point, name="after-b", priority="high")(lambda ctx: None)
    weaver.around(point, name="wrap")(lambda ctx, proceed: proceed())
    weaver.on_error(point, name="oops")(lambda ctx: None)
    rows = weaver.describe(point)
    table = [(r.stage, r.order, r.advice, r.priority) for r in rows]
    assert table == [
        ("before", 1, "first", 0),
        ("before", 2, "middle", 50),
        ("before", 3, "late", 70),
        ("around", 1, "wrap", 50),
        ("after", 1, "after-b", 30),
        ("after", 2, "after-a", 50),
        ("on_error", 1, "oops", 50),
    ]
    assert rows.advice_names(point, "before") == ["first", "middle", "late"]
    assert step() == 1


def test_order_constraints_show_in_describe(weaver: ah.Weaver, point: str) -> None:
    """describe() shows the order after order_after / order_before are resolved."""
    step = _declare(weaver, point)
    weaver.after(point, name="save")(lambda ctx: None)
    weaver.after(point, name="ema", order_before=("save",))(lambda ctx: None)
    assert weaver.describe(point).advice_names(point, "after") == ["ema", "save"]
    assert step() == 1


def test_aspect_and_filters_columns(weaver: ah.Weaver, point: str) -> None:
    """Rows name the aspect of aspect advice and spell out its filters."""
    step = _declare(weaver, point)

    class Checkpoint(Aspect):
        @after(point, every=100, rank=0, errors="log")
        def save(self, ctx: Any) -> None:
            pass

    weaver.register(Checkpoint())
    weaver.before(point, once=True, when=lambda ctx: True)(lambda ctx: None)
    rows = {r.stage: r for r in weaver.describe(point)}
    assert rows["after"].aspect == "checkpoint"
    assert rows["after"].advice == "checkpoint.save"
    assert rows["after"].filters == "every=100, rank=0, errors=log"
    assert rows["before"].filters == "once, when=<lambda>"
    assert step() == 1


def test_joinpoint_without_advice_has_one_row(weaver: ah.Weaver, point: str) -> None:
    """A join point with no advice is listed once, with an empty stage."""
    step = _declare(weaver, point)
    (row,) = ah.describe(point)
    assert (row.joinpoint, row.stage, row.advice, row.status) == (point, "", "", "active")
    assert row.location == _where(step.__wrapped__)


def test_failures_are_counted(weaver: ah.Weaver, point: str) -> None:
    """A failing errors='log' advice shows its failure count."""
    step = _declare(weaver, point)

    @weaver.before(point, errors="log")
    def flaky(ctx: Any) -> None:
        raise RuntimeError("flaky")

    with capture_logs():
        step()
        step()
    (row,) = weaver.describe(point)
    assert row.failures == 2


def _header(table: str) -> str:
    """The line of a printed table that names its columns."""
    return next(line for line in table.splitlines() if "join point" in line and "status" in line)


def test_the_table_shows_failures_when_advice_failed(
    weaver: ah.Weaver, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An errors='log' advice that failed shows its failures in the printed table, rich or
    plain (the rows had them, the table did not: a failing advice looked healthy there);
    a table with no failure has no such column."""
    step = _declare(weaver, point)
    weaver.before(point, name="healthy")(lambda ctx: None)
    assert "failures" not in _header(str(weaver.describe(point)))

    @weaver.before(point, errors="log")
    def flaky(ctx: Any) -> None:
        raise RuntimeError("flaky")

    with capture_logs():
        for _ in range(3):
            step()
    for plain in (False, True):
        if plain:
            monkeypatch.setitem(sys.modules, "rich.console", None)
        text = str(weaver.describe(point))
        assert "failures" in _header(text)
        lines = text.splitlines()
        [flaky_line] = [line for line in lines if "flaky" in line]
        [healthy_line] = [line for line in lines if "healthy" in line]
        assert re.search(r"\b3\b", flaky_line)
        assert not re.search(r"\b3\b", healthy_line)


def test_describe_selects_by_pointcut(weaver: ah.Weaver, point: str) -> None:
    """describe(pointcut) lists only the join points the pointcut selects."""
    one = _declare(weaver, f"{point}.one")
    two = _declare(weaver, f"{point}.two")
    assert {r.joinpoint for r in ah.describe(f"{point}.*")} == {f"{point}.one", f"{point}.two"}
    assert {r.joinpoint for r in ah.describe(f"{point}.one")} == {f"{point}.one"}
    assert one() == two() == 1


def test_describe_by_pointcut_leaves_out_weaves_of_other_targets(
    weaver: ah.Weaver, point: str
) -> None:
    """A weave of another target that did not take (a module not installed) is not a row
    of describe(pointcut) for an unrelated join point; describe() still lists it."""
    step = _declare(weaver, point)
    with capture_logs(), weaver.weave("no_such_module_for_describe.fn", after=lambda ctx: None):
        assert {r.joinpoint for r in ah.describe(point)} == {point}
        [skipped] = [r for r in ah.describe() if r.joinpoint == "no_such_module_for_describe.fn"]
    assert skipped.status == "skipped"
    assert step() == 1


def test_describe_by_a_predicate_with_a_weave_not_in_place(weaver: ah.Weaver, point: str) -> None:
    """A predicate over join point attributes selects join points even while a weave is
    skipped: the skipped weave, which has no join point to judge, is left out."""
    step = _declare(weaver, point)  # kept: a join point no one holds may be collected
    sync = ah.Predicate(lambda jp: not jp.is_async)
    with capture_logs(), weaver.weave("no_such_module_for_describe.fn", after=lambda ctx: None):
        rows = ah.describe(sync)
    assert point in {r.joinpoint for r in rows}
    assert "no_such_module_for_describe.fn" not in {r.joinpoint for r in rows}
    assert step() == 1


def test_names_in_the_table_are_text_not_markup(weaver: ah.Weaver, point: str) -> None:
    """A join point named with brackets ('eval[val]') shows as it is in the table."""
    name = "t_describe.eval[val]"
    step = _declare(weaver, name)
    weaver.before("t_describe.eval[[]val]", name="[bold]warmup")(lambda ctx: None)
    text = str(weaver.describe())
    assert name in text
    assert "[bold]warmup" in text
    assert step() == 1


def test_str_renders_a_table(weaver: ah.Weaver, point: str) -> None:
    """str(describe()) is a table with headers, the join point and its advice."""
    step = _declare(weaver, point)
    weaver.before(point, name="warmup")(lambda ctx: None)
    text = str(ah.describe(point))
    assert "join point" in text
    assert "advice" in text
    assert point in text
    assert "warmup" in text
    assert step() == 1


def test_without_rich_the_table_is_plain_text_with_every_column(
    weaver: ah.Weaver, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without rich (an optional extra) str(describe()) is still a table: a header line with
    the columns rich shows, and each row's aspect, filters and location under them."""

    class Warmup(Aspect):
        @ah.before(point, every=2)
        def warm(self, ctx: Any) -> None:
            pass

    step = _declare(weaver, point)
    weaver.register(Warmup())
    rich_text = str(weaver.describe(point))
    monkeypatch.setitem(sys.modules, "rich.console", None)  # import rich.console fails
    text = str(weaver.describe(point))
    assert text != rich_text
    lines = text.splitlines()
    header = lines[1].split("  ")
    assert [c.strip() for c in header if c.strip()] == [
        "join point", "stage", "#", "advice", "priority", "aspect", "filters", "status",
        "where", "note",
    ]  # fmt: skip
    row = next(line for line in lines if "warm" in line)
    for column, value in [
        ("aspect", "warmup"),
        ("filters", "every=2"),
        ("where", "test_describe.py:"),
    ]:
        assert row[lines[1].index(column) :].startswith(value)
    assert step() == 1


def test_describe_is_a_list_of_rows(weaver: ah.Weaver, point: str) -> None:
    """describe() returns a list of Row objects a program can read."""
    step = _declare(weaver, point)
    rows = ah.describe(point)
    assert isinstance(rows, list)
    assert all(isinstance(r, ah.Row) for r in rows)
    assert rows.for_joinpoint(point) == list(rows)
    assert step() == 1


# -- unmatched advice --------------------------------------------------------------------------


def test_advice_for_an_undeclared_name_is_unmatched_with_a_suggestion(
    weaver: ah.Weaver, point: str
) -> None:
    """Advice for a name no join point has is 'unmatched', with a did-you-mean for a close name."""
    step = _declare(weaver, f"{point}.train_iter")

    def warmup(ctx: Any) -> None:
        pass

    weaver.before(f"{point}.trian_iter")(warmup)
    unmatched = [r for r in weaver.describe() if r.status == "unmatched"]
    assert len(unmatched) == 1
    row = unmatched[0]
    assert row.joinpoint == ""
    assert row.stage == "before"
    assert row.advice == "warmup"
    assert row.location == _where(warmup)
    assert f"no join point named '{point}.trian_iter'" in row.note
    assert f"did you mean '{point}.train_iter'?" in row.note
    assert "unmatched" in str(weaver.describe())
    assert step() == 1


def test_unmatched_without_a_close_name_has_no_suggestion(weaver: ah.Weaver) -> None:
    """An unmatched name with nothing close to it gets no did-you-mean."""
    weaver.after("zzqx_describe_nothing_like_it_0192")(lambda ctx: None)
    (row,) = [r for r in weaver.describe() if r.status == "unmatched"]
    assert "no join point named" in row.note
    assert "did you mean" not in row.note


def test_advice_becomes_matched_when_its_joinpoint_appears(weaver: ah.Weaver, point: str) -> None:
    """Once a join point with the name is declared, the advice is listed under it."""
    weaver.after(point, name="late_bound")(lambda ctx: None)
    assert [r.status for r in weaver.describe() if r.advice == "late_bound"] == ["unmatched"]
    step = _declare(weaver, point)
    (row,) = weaver.describe(point)
    assert (row.joinpoint, row.advice, row.status) == (point, "late_bound", "active")
    assert not [r for r in weaver.describe() if r.status == "unmatched"]
    assert step() == 1


def test_glob_advice_that_matches_nothing_is_unmatched(weaver: ah.Weaver) -> None:
    """Advice whose glob matches no join point name is listed 'unmatched' as advice for an
    undeclared name is, so a mistyped glob is not silently useless."""

    def nowhere(ctx: Any) -> None:
        pass

    weaver.before("zzqx_describe.no_such_family.*")(nowhere)
    (row,) = [r for r in weaver.describe() if r.status == "unmatched"]
    assert (row.joinpoint, row.stage, row.advice) == ("", "before", "nowhere")
    assert row.location == _where(nowhere)
    assert row.note == "no join point name matches 'zzqx_describe.no_such_family.*'"


def test_a_mistyped_glob_is_unmatched_with_the_name_it_nearly_matches(
    weaver: ah.Weaver, point: str
) -> None:
    """A glob whose text before its wildcard (or after it) is a typo of a join point
    name's start (or end) says which name it nearly matches."""
    step = _declare(weaver, f"{point}.train_iter")
    weaver.before(f"{point}.trian_*", name="warmup")(lambda ctx: None)
    weaver.after(f"*{point[-6:]}.train_itre", name="late")(lambda ctx: None)
    notes = {r.advice: r.note for r in weaver.describe() if r.status == "unmatched"}
    near = f"did you mean a pattern that matches '{point}.train_iter'?"
    assert notes == {
        "warmup": f"no join point name matches '{point}.trian_*'; {near}",
        "late": f"no join point name matches '*{point[-6:]}.train_itre'; {near}",
    }
    assert step() == 1


def test_glob_advice_is_matched_once_a_joinpoint_fits_it(weaver: ah.Weaver, point: str) -> None:
    """Glob advice is unmatched only while no join point fits: once one is declared it
    is listed under it, and a glob that fits a declared one is never unmatched."""
    weaver.after(f"{point}.*", name="late_bound")(lambda ctx: None)
    assert [r.status for r in weaver.describe() if r.advice == "late_bound"] == ["unmatched"]
    step = _declare(weaver, f"{point}.step")
    rows = weaver.describe()
    assert [(r.joinpoint, r.status) for r in rows if r.advice == "late_bound"] == [
        (f"{point}.step", "active")
    ]
    assert not [r for r in rows if r.status == "unmatched"]
    assert step() == 1


def test_describe_with_a_pointcut_lists_the_unmatched_globs_it_selects(
    weaver: ah.Weaver, point: str
) -> None:
    """describe(name) lists unmatched glob advice that would match that name (and
    describe(glob) the advice of that very glob), not every unmatched glob."""
    weaver.before(f"{point}.train_*", name="train_glob")(lambda ctx: None)
    weaver.before(f"{point}.val_*", name="val_glob")(lambda ctx: None)
    assert [r.advice for r in weaver.describe(f"{point}.train_iter")] == ["train_glob"]
    assert [r.advice for r in weaver.describe(f"{point}.val_*")] == ["val_glob"]
    assert {r.advice for r in weaver.describe() if r.status == "unmatched"} == {
        "train_glob",
        "val_glob",
    }


def test_a_name_or_glob_pointcut_says_both_when_unmatched(weaver: ah.Weaver) -> None:
    """Name | Glob advice that matches nothing names both in its note; a predicate
    alone names nothing to check and is not listed."""
    pointcut = ah.Name("zzqx_describe_exact") | ah.Glob("zzqx_describe_g*")
    weaver.before(pointcut, name="both")(lambda ctx: None)
    weaver.before(lambda jp: False, name="predicate")(lambda ctx: None)
    (row,) = [r for r in weaver.describe() if r.status == "unmatched"]
    assert row.advice == "both"
    assert row.note == (
        "no join point named 'zzqx_describe_exact'; no join point name matches 'zzqx_describe_g*'"
    )


def test_rows_of_a_joinpoint_can_be_looked_up_by_an_alias(weaver: ah.Weaver, point: str) -> None:
    """for_joinpoint() and advice_names() answer to a join point's aliases, as describe()
    and pointcuts do."""
    alias = f"{point}.encode"

    def via_alias(ctx: Any) -> None:
        pass

    with weaver.weave("json.dumps", after=lambda ctx: None, name=alias):
        weaver.before(alias)(via_alias)
        rows = weaver.describe()
        assert rows.for_joinpoint(alias) == rows.for_joinpoint("json.dumps") != []
        assert rows.advice_names(alias, "before") == ["via_alias"]
        assert {r.aliases for r in rows.for_joinpoint(alias)} == {(alias,)}


def test_advice_names_refuses_an_unknown_stage(weaver: ah.Weaver, point: str) -> None:
    """advice_names() with a misspelt stage raises, naming the stages, instead of []."""
    step = _declare(weaver, point)
    with pytest.raises(InvalidOptionError, match=r"'bfore'.*'before', 'around', 'after'"):
        weaver.describe().advice_names(point, "bfore")
    assert step() == 1


def test_advice_names_refuses_a_joinpoint_not_in_the_description(
    weaver: ah.Weaver, point: str
) -> None:
    """advice_names() of a name no join point in the description has raises, naming the
    closest one and the known ones, instead of the [] of a join point without advice."""
    step = _declare(weaver, f"{point}.train_iter")
    rows = weaver.describe()
    assert rows.advice_names(f"{point}.train_iter", "before") == []
    with pytest.raises(InvalidOptionError) as caught:
        rows.advice_names(f"{point}.trian_iter", "before")
    assert str(caught.value).startswith(
        f"join point '{point}.trian_iter' is not in this description (its join points: "
    )
    assert str(caught.value).endswith(f"; did you mean '{point}.train_iter'?")
    assert (caught.value.option, caught.value.value) == ("joinpoint", f"{point}.trian_iter")
    with pytest.raises(InvalidOptionError, match=r"'zzqx'.*give one of its join points$"):
        rows.advice_names("zzqx", "after")
    assert step() == 1


def test_advice_names_of_an_empty_description_says_it_has_no_joinpoints(
    weaver: ah.Weaver, point: str
) -> None:
    """describe() of a pointcut that selects nothing has no join points to look up:
    the error says so rather than listing none."""
    with pytest.raises(InvalidOptionError, match=r"which has no join points: none is declared"):
        weaver.describe(f"{point}.nothing").advice_names(f"{point}.nothing", "before")


def test_advice_names_lists_a_long_descriptions_first_joinpoints(
    weaver: ah.Weaver, point: str
) -> None:
    """The error lists a description's first join point names, and how many in all."""
    steps = [_declare(weaver, f"{point}.step{i:02}") for i in range(20)]  # kept alive
    rows = weaver.describe(f"{point}.*")
    with pytest.raises(InvalidOptionError, match=r", \.\.\. \(\d+ in all\)\); did you mean"):
        rows.advice_names(f"{point}.stpe01", "before")
    assert len(steps) == 20


def test_printing_a_table_leaves_a_seeded_random_stream_as_it_was() -> None:
    """rich draws random bits when first imported; the tables import it lazily, mid-run
    perhaps, and must not move Python's ``random`` (a seeded run would then draw other
    numbers than the same run that prints nothing)."""
    code = textwrap.dedent(
        """\
        import random, sys
        import aspecthook as ah
        from aspecthook.aspects import Timed
        random.seed(0)
        assert "rich" not in sys.modules
        str(ah.describe())
        str(Timed().summary())
        assert "rich" in sys.modules
        print(random.random())
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    random.seed(0)
    assert float(done.stdout) == random.random()


def test_a_weaver_that_is_not_a_weaver_is_refused() -> None:
    """describe(weaver=5) names the option (it was an AttributeError from the registry)."""
    with pytest.raises(InvalidOptionError, match=r"weaver=5 is not a Weaver"):
        ah.describe(weaver=5)  # type: ignore[arg-type]


def _on_rows(rows: list[ah.Row]) -> list[tuple[str, int, str, int | None]]:
    return [(r.joinpoint, r.order, r.advice, r.priority) for r in rows if r.stage == "on"]


def test_event_subscribers_are_listed_in_the_order_they_run(weaver: ah.Weaver, point: str) -> None:
    """One row per subscription, stage 'on', under the pattern it subscribes to, in the
    order emit() runs them: ascending priority, ties by registration, across patterns."""
    weaver.on(f"{point}.saved", name="late", priority="low")(lambda e: None)
    weaver.on(f"{point}.*", name="first", priority="highest")(lambda e: None)
    weaver.on(f"{point}.saved", name="middle-1")(lambda e: None)
    weaver.on(f"{point}.*", name="middle-2")(lambda e: None)
    weaver.on(f"{point}.loaded", name="other")(lambda e: None)
    rows = weaver.describe()
    assert _on_rows(rows) == [
        (f"{point}.*", 1, "first", 0),
        (f"{point}.saved", 2, "middle-1", 50),
        (f"{point}.*", 3, "middle-2", 50),
        (f"{point}.loaded", 4, "other", 50),
        (f"{point}.saved", 5, "late", 70),
    ]
    assert rows.advice_names(f"{point}.saved", "on") == ["first", "middle-1", "middle-2", "late"]
    assert rows.advice_names(f"{point}.*", "on") == ["first", "middle-2"]


def test_advice_names_of_an_event_is_what_emit_runs(weaver: ah.Weaver, point: str) -> None:
    """advice_names(event, 'on') names the subscribers emit(event) calls, in that order."""
    ran: list[str] = []
    weaver.on(f"{point}.*", name="glob", priority="low")(lambda e: ran.append("glob"))
    weaver.on(f"{point}.saved", name="exact")(lambda e: ran.append("exact"))
    weaver.on(f"{point}.sav?d", name="early", priority="high")(lambda e: ran.append("early"))
    weaver.emit(f"{point}.saved")
    assert weaver.describe().advice_names(f"{point}.saved", "on") == ran
    assert ran == ["early", "exact", "glob"]
    assert weaver.describe().advice_names(f"{point}.unheard", "on") == ["glob"]
    assert weaver.describe().advice_names("no.subscriber", "on") == []  # any name may be sent


def test_a_removed_subscribers_row_is_gone(weaver: ah.Weaver, point: str) -> None:
    """Removing a subscription takes its row away; the others are renumbered."""
    first = weaver.on(point, name="first")(lambda e: None)
    weaver.on(point, name="second")(lambda e: None)
    assert [r.advice for r in weaver.describe(point) if r.stage == "on"] == ["first", "second"]
    first.remove()
    assert _on_rows(weaver.describe(point)) == [(point, 1, "second", 50)]


def test_an_aspects_event_method_is_listed_with_its_aspect(weaver: ah.Weaver, point: str) -> None:
    """An Aspect's @on method has a row with the aspect's name, its filters and file:line."""

    class Saver(Aspect):
        @ah.on(f"{point}.saved", every=2)
        def remember(self, event: Any) -> None:
            pass

    handle = weaver.register(Saver())
    (row,) = [r for r in weaver.describe() if r.stage == "on"]
    assert (row.joinpoint, row.advice, row.aspect, row.filters) == (
        f"{point}.saved",
        "saver.remember",
        "saver",
        "every=2",
    )
    assert row.status == "active"
    assert row.location == _where(Saver.remember)
    handle.remove()
    assert not [r for r in weaver.describe() if r.stage == "on"]


def test_describe_selects_subscriptions_by_pattern_or_event_name(
    weaver: ah.Weaver, point: str
) -> None:
    """describe(event) lists the subscriptions that event reaches, describe(glob) those
    whose pattern it matches; their order stays their place among all subscriptions."""
    step = _declare(weaver, f"{point}.step")
    weaver.on(f"{point}.ckpt.*", name="any")(lambda e: None)
    weaver.on(f"{point}.ckpt.saved", name="saved")(lambda e: None)
    weaver.on(f"{point}.other", name="other")(lambda e: None)
    assert _on_rows(weaver.describe(f"{point}.ckpt.saved")) == [
        (f"{point}.ckpt.*", 1, "any", 50),
        (f"{point}.ckpt.saved", 2, "saved", 50),
    ]
    assert [r.advice for r in weaver.describe(f"{point}.ckpt.*") if r.stage] == ["any", "saved"]
    assert [r.advice for r in weaver.describe(f"{point}.step")] == [""]  # the join point only
    assert step() == 1


def test_event_rows_keep_the_tables_columns(
    weaver: ah.Weaver, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subscription's row fills the same columns as advice at a join point, in the rich
    table and in the plain one."""
    weaver.on(f"{point}.*", name="notify", priority="high", rank=0)(lambda e: None)
    lines = [line for line in str(weaver.describe(f"{point}.*")).splitlines() if "notify" in line]
    assert len(lines) == 1
    assert re.search(rf"{re.escape(point)}\.\*\s*│\s*on\s*│\s*1\s*│\s*notify\s*│\s*30", lines[0])
    monkeypatch.setitem(sys.modules, "rich.console", None)  # import rich.console fails
    plain = str(weaver.describe(f"{point}.*")).splitlines()
    header = plain[1]
    (row,) = [line for line in plain if "notify" in line]
    assert row.index("notify") == header.index("advice")
    assert row.index("rank=0") == header.index("filters")
    assert row.index("active") == header.index("status")


def test_advice_names_takes_the_event_stage(weaver: ah.Weaver, point: str) -> None:
    """'on' is a stage for advice_names(); a misspelt stage's error names it too, and a
    pattern is not a join point for the other stages."""
    weaver.on(f"{point}.*")(lambda e: None)
    rows = weaver.describe()
    with pytest.raises(InvalidOptionError, match=r"'bfore'.*'on_error', 'on'"):
        rows.advice_names(point, "bfore")
    with pytest.raises(InvalidOptionError, match=r"is not in this description"):
        rows.advice_names(f"{point}.*", "before")


def test_table_keeps_long_names_and_every_column(weaver: ah.Weaver, point: str) -> None:
    """A join point name wider than the table's usual 160 columns is shown whole and the
    other columns keep their headers: the table grows instead (at 160 columns they were
    squeezed to nothing)."""
    name = f"{point}." + "very_long_module_name_" * 8
    step = _declare(weaver, name)
    weaver.before(name, name="warmup", every=2)(lambda ctx: None)
    with ah.track_calls():
        step()
    text = str(weaver.describe(name))
    assert name in text
    for column in ("stage", "priority", "aspect", "filters", "status", "calls", "time"):
        assert column in text
    assert "every=2" in text


class _Shape:
    def area(self) -> int:
        raise NotImplementedError

    def name(self) -> str:
        return "shape"


class _Square(_Shape):
    def area(self) -> int:
        return 4


def test_a_method_that_loaded_subclasses_override_is_noted_with_what_to_weave(
    weaver: ah.Weaver,
) -> None:
    """Weaving ``Base.m`` does not reach a subclass's own ``m`` (the optimizers' ``step``):
    the row says so and names the ``Base+.m`` weave that does; once that weave is in place,
    or for a method no subclass overrides, there is no such note."""
    weaver.weave(f"{__name__}._Shape.area", before=lambda ctx: None)
    weaver.weave(f"{__name__}._Shape.name", before=lambda ctx: None)
    notes = {row.joinpoint: row.note for row in ah.describe(weaver=weaver)}
    assert notes[f"{__name__}._Shape.area"] == (
        "overridden in 1 loaded subclass (_Square), whose calls reach it only through "
        f"super(): weave '{__name__}._Shape+.area' to reach theirs too"
    )
    assert notes[f"{__name__}._Shape.name"] == ""
    weaver.weave(f"{__name__}._Shape+.area", before=lambda ctx: None)
    notes = {row.joinpoint: row.note for row in ah.describe(weaver=weaver)}
    assert "overridden" not in notes[f"{__name__}._Shape.area"]
    assert "overridden" not in notes[f"{__name__}._Square.area"]
