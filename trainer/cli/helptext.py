"""How ``trainer ... --help`` is laid out: paragraphs reflowed to the terminal's width.

Help is click's plain layout (``Usage:``, the description, ``Options:``, ``Commands:``), not
Typer's Rich panels: those keep every line break of a docstring (lines then break mid-sentence
at any width but the one the source was written at) and squeeze the option table's help column,
cutting long words with an ellipsis. Here:

- the width is the terminal's (``COLUMNS`` when set, 80 when the output is not a terminal),
  less a margin of :data:`MARGIN` columns;
- each paragraph (text between blank lines) is reflowed to that width; a paragraph whose first
  line is ``\\b`` alone is preformatted (a command example, a list) and printed as written,
  click's convention (https://click.palletsprojects.com/en/stable/documentation/);
- a line is broken only at spaces: a path, a URL, an option or a long word is never cut or
  split at its hyphens, and a word longer than the width is the one thing that may overrun it;
- the list of commands shows each command's first sentence whole, wrapped like the rest.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from collections.abc import Sequence

from typer._click.core import Command, Context
from typer._click.formatting import HelpFormatter, iter_rows, measure_table
from typer._click.utils import make_default_short_help
from typer.core import MarkupMode

HELP_MARKUP: MarkupMode = None
"""Every ``typer.Typer`` of the CLI is made with this ``rich_markup_mode``: None is click's
plain help (formatted here) and click's plain usage errors, not Rich panels."""

MARGIN = 2
"""Columns left free at the right edge (click's own margin)."""
MIN_WIDTH = 20
"""Narrower terminals still get this many columns, so the layout does not collapse."""
PREFORMATTED = "\b"
"""A paragraph whose first line is this alone is printed as written."""


def help_width() -> int:
    """The width help is wrapped to: the terminal's (``COLUMNS`` first) less :data:`MARGIN`."""
    return max(shutil.get_terminal_size().columns - MARGIN, MIN_WIDTH)


def paragraphs(text: str) -> list[tuple[bool, list[str]]]:
    """``text`` as paragraphs, each ``(preformatted, lines)``; a preformatted paragraph's
    lines are kept as written (less the marker), a prose paragraph's are to be reflowed."""
    out: list[tuple[bool, list[str]]] = []
    for block in textwrap.dedent(text.expandtabs()).strip("\n").split("\n\n"):
        lines = block.strip("\n").splitlines()
        if not lines:
            continue
        if lines[0].strip() == PREFORMATTED:
            out.append((True, lines[1:]))
        else:
            out.append((False, [line.strip() for line in lines]))
    return out


def reflow(text: str, width: int, indent: str = "") -> str:
    """``text`` reflowed paragraph by paragraph to ``width`` columns (``indent`` included),
    broken only at spaces; preformatted paragraphs are indented and otherwise kept."""
    wrapper = textwrap.TextWrapper(
        width=max(width, len(indent) + 1),
        initial_indent=indent,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    out = []
    for preformatted, lines in paragraphs(text):
        if preformatted:
            out.append("\n".join(f"{indent}{line}".rstrip() for line in lines))
        else:
            out.append(wrapper.fill(" ".join(lines)))
    return "\n\n".join(out)


_KEPT_SPACE = "\0"
_EXTRA = re.compile(r"  (\[[^\]\n]*\])$")


def _bracket_kept(text: str, width: int) -> str:
    """``text`` whose trailing ``[default: ...; required]`` (click appends it after two
    spaces) is bound with :data:`_KEPT_SPACE` so it is not split, when it fits on a line."""
    extra = _EXTRA.search(text)
    if extra is None or len(extra.group(1)) > width:
        return text
    return text[: extra.start(1)] + extra.group(1).replace(" ", _KEPT_SPACE)


class ReflowingHelpFormatter(HelpFormatter):
    """click's help formatter, wrapping with :func:`reflow` at :func:`help_width`."""

    def __init__(
        self, indent_increment: int = 2, width: int | None = None, max_width: int | None = None
    ) -> None:
        # ``max_width`` is click's cap (80 by default); help here uses the terminal's width.
        super().__init__(indent_increment, width=width if width is not None else help_width())

    def write_text(self, text: str) -> None:
        self.write(reflow(text, self.width, " " * self.current_indent))
        self.write("\n")

    def write_dl(
        self, rows: Sequence[tuple[str, str]], col_max: int = 30, col_spacing: int = 2
    ) -> None:
        # click's layout (terms in a column of at most ``col_max``, a longer term on a line of
        # its own), its text column reflowed.
        rows = list(rows)
        first_col = min(measure_table(rows)[0], col_max) + col_spacing
        text_col = first_col + self.current_indent
        for first, second in iter_rows(rows, 2):
            self.write(f"{'':>{self.current_indent}}{first}")
            if not second:
                self.write("\n")
                continue
            if len(first) <= first_col - col_spacing:
                self.write(" " * (first_col - len(first)))
            else:
                self.write("\n" + " " * text_col)
            text_width = max(self.width - text_col, 10)
            wrapped = reflow(_bracket_kept(second, text_width), text_width)
            lines = wrapped.replace(_KEPT_SPACE, " ").splitlines() or [""]
            self.write(f"{lines[0]}\n")
            for line in lines[1:]:
                self.write(f"{' ' * text_col}{line}\n" if line else "\n")


class ReflowingContext(Context):
    formatter_class = ReflowingHelpFormatter


def first_sentence(help_text: str) -> str:
    """The first sentence of ``help_text``'s first paragraph, whole (click cuts it to fit)."""
    return make_default_short_help(help_text, max_length=len(help_text) + 1)


def reflowing_help(command: Command) -> Command:
    """``command`` (and, for a group, each command already built in it) set to print help
    with :class:`ReflowingHelpFormatter`, listed under its group by its whole first sentence.
    Returns ``command``."""
    command.context_class = ReflowingContext
    if command.help and not command.short_help:
        command.short_help = first_sentence(command.help)
    for sub in getattr(command, "commands", {}).values():
        reflowing_help(sub)
    return command
