"""Strings from a program or a profile, made inert for each output they reach.

Op types, module paths, annotations, host names and file paths come from the profiled program or
from a profile file someone handed over: none of them may change an output's structure. Each
output has one function here:

- :func:`visible` / :func:`terminal` / :func:`cell`: the terminal (control characters, escape
  sequences and bidirectional overrides shown escaped; Rich markup escaped);
- :func:`toml_string`: a TOML basic string (quotes, backslashes and control characters escaped);
- :func:`xml_text`: text for XML 1.0 (characters XML cannot carry shown escaped; the XML library
  escapes the rest);
- :func:`markdown_code`: an inline code span that no backtick, pipe or newline in the text can
  end.

Nothing here imports torch; the analysis side uses it.
"""

from __future__ import annotations

import re

from rich.markup import escape as _rich_escape
from rich.text import Text

#: C0 and C1 controls, DEL, and the Unicode bidirectional controls (RLO, LRI, ...)
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
#: characters XML 1.0 cannot carry, plus the C1 and bidi controls a reader would not see
_XML_UNSAFE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
    "\ud800-\udfff\ufffe\uffff]"
)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object) -> str:
    """``text`` with control characters and bidi overrides written as ``\\xNN`` / ``\\uNNNN``."""
    return _UNSAFE.sub(_escaped, str(text))


def terminal(text: object) -> str:
    """``text`` safe to interpolate into a Rich markup string."""
    return _rich_escape(visible(text))


def cell(text: object) -> Text:
    """``text`` as a Rich ``Text`` (never parsed as markup), control characters escaped."""
    return Text(visible(text))


_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n"}
_TOML_ESCAPES.update({"\f": "\\f", "\r": "\\r"})
_TOML_UNSAFE = re.compile('["\\\\\x00-\x1f\x7f]')


def toml_string(text: str) -> str:
    """``text`` as a quoted TOML basic string (usable as a value or a quoted key)."""

    def escape(match: re.Match[str]) -> str:
        ch = match.group()
        return _TOML_ESCAPES.get(ch, f"\\u{ord(ch):04x}")

    return '"' + _TOML_UNSAFE.sub(escape, text) + '"'


def xml_text(text: object) -> str:
    """``text`` with the characters XML 1.0 cannot carry (and invisible controls) escaped."""
    return _XML_UNSAFE.sub(_escaped, str(text))


def markdown_code(text: object) -> str:
    """``text`` as an inline Markdown code span, safe in a table cell.

    The fence is one backtick longer than the longest run of backticks in the text, newlines
    become spaces, pipes are escaped (GitHub tables split cells on them even inside code) and
    control characters are shown escaped.
    """
    body = visible(str(text).replace("\r\n", " ").replace("\n", " ")).replace("|", "\\|")
    longest = max((len(run) for run in re.findall("`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") or not body else ""
    return f"{fence}{pad}{body}{pad}{fence}"


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+\-.!|~&])")


def markdown_text(text: object) -> str:
    """``text`` as plain Markdown text: every character Markdown or HTML would read as syntax
    backslash-escaped, newlines as spaces, control characters shown escaped."""
    flat = str(text).replace("\r\n", " ").replace("\n", " ")
    return _MARKDOWN_SPECIAL.sub(r"\\\1", visible(flat))
