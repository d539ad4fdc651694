"""Every ``trainer ... --help`` reads as paragraphs at any terminal width (trainer/cli/helptext.py):
prose is reflowed to ``COLUMNS``, preformatted (``\\b``) blocks keep their layout, and only a
word too long for its column ever overruns the width.

What a user would see as a line "broken mid-sentence", precisely: two consecutive lines of the
same paragraph (the same text column: a description paragraph, or one option's or command's
help in its column) where the first word of the second line would have fitted at the end of
the first. A greedy wrap never does that; keeping the source's line breaks (as Rich help did)
does it at every width but the one the source was written at."""

from __future__ import annotations

import re

import pytest
import typer
from typer._click.core import Command
from typer.testing import CliRunner

from trainer.cli.helptext import MARGIN, PREFORMATTED, paragraphs, reflow
from trainer.cli.main import app

WIDTHS = (60, 80, 120, 200)
# A definition-list row's first line: the term, two or more spaces, the start of its text.
DL_ROW = re.compile(r"^( +)(\S(?:.*?\S)?)( {2,})(\S.*)$")
SECTION = re.compile(r"^\S[^:]*:$")  # "Options:", "Commands:"


def _commands(command: Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [path]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        out += _commands(sub, (*path, name))
    return out


ROOT = typer.main.get_command(app)
COMMAND_PATHS = _commands(ROOT)


def _command(path: tuple[str, ...]) -> Command:
    command = ROOT
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return command


def _preformatted_lines() -> set[str]:
    lines: set[str] = set()
    for path in COMMAND_PATHS:
        command = _command(path)
        texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        for text in texts:
            for preformatted, block in paragraphs(text):
                if preformatted:
                    lines |= {line.strip() for line in block if line.strip()}
    return lines


PREFORMATTED_LINES = _preformatted_lines()


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _text_column(line: str, in_list: bool) -> int | None:
    """Where ``line``'s text starts: its indent, or in a definition list the column of the
    text after the term (None for a term alone on its line)."""
    if in_list:
        row = DL_ROW.match(line)
        if row and _indent(line) == 2:
            return len(row.group(1)) + len(row.group(2)) + len(row.group(3))
        if _indent(line) == 2:
            return None
    return _indent(line)


def help_problems(text: str, columns: int) -> list[str]:
    """Lines broken early (see the module's docstring) and lines wider than ``columns`` that
    are not one unbreakable word."""
    width = columns - MARGIN
    problems = []
    lines = text.splitlines()
    in_list = False
    columns_of: list[int | None] = []
    for line in lines:
        if SECTION.match(line):
            in_list = True
        columns_of.append(_text_column(line, in_list) if line.strip() else None)
    for i, line in enumerate(lines):
        col = columns_of[i]
        if len(line) > columns and (col is None or len(line[col:].split()) > 1):
            problems.append(f"wider than {columns}: {line!r}")
        if i + 1 == len(lines) or col is None or line.strip() in PREFORMATTED_LINES:
            continue
        nxt = lines[i + 1]
        if columns_of[i + 1] != col or _indent(nxt) != col or nxt.strip() in PREFORMATTED_LINES:
            continue  # not the next line of the same paragraph
        rest = nxt.strip()
        # click appends "[default: ...]" after two spaces; it is kept whole when it fits.
        extra = rest.startswith("[") and rest.endswith("]")
        needed = len(line) + (2 + len(rest) if extra else 1 + len(rest.split()[0]))
        if needed <= width:
            problems.append(f"broken early: {line!r} / {nxt!r}")
    return problems


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("path", COMMAND_PATHS, ids=lambda p: " ".join(p) or "trainer")
def test_help_is_reflowed_to_the_terminal_width(path: tuple[str, ...], columns: int) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    assert help_problems(result.stdout, columns) == []
    assert "\x1b" not in result.stdout and "…" not in result.stdout and "╭" not in result.stdout


def test_every_command_is_listed_by_its_whole_first_sentence() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"})
    listed = " ".join(result.stdout.split("Commands:")[1].split())
    assert "..." not in listed
    assert "Run the TrainJob controller until SIGTERM: watch caches on every replica" in listed


def test_preformatted_blocks_keep_their_layout() -> None:
    webhook = CliRunner().invoke(app, ["webhook", "--help"], env={"COLUMNS": "60"}).stdout
    assert "\n    /mutate-trainer-kubeflow-org-v1alpha1-trainjob\n" in webhook
    assert PREFORMATTED not in webhook
    text = f"One two three four five six.\n\n{PREFORMATTED}\n  $ trainer run \\\n      -f job.yaml"
    assert reflow(text, 12, "  ") == (
        "  One two\n  three four\n  five six.\n\n    $ trainer run \\\n        -f job.yaml"
    )


def test_words_are_never_cut_nor_split_at_hyphens() -> None:
    text = "See docs/local-plane.md and --no-strict-fields: https://example.com/a-very-long-path"
    lines = reflow(text, 20).splitlines()
    assert lines == [
        "See",
        "docs/local-plane.md",
        "and",
        "--no-strict-fields:",
        "https://example.com/a-very-long-path",
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("  Starts the API server and\n  the controller.\n", "broken early"),
        (
            "Options:\n  -f, --file <str>  A file to read,\n                    then check.\n",
            "early",
        ),
        ("  " + "word " * 30 + "\n", "wider than 80"),
    ],
)
def test_the_check_finds_each_kind_of_bad_line(text: str, problem: str) -> None:
    assert any(problem in p for p in help_problems(text, 80))
