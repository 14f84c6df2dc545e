"""Budget files: the limits a gate checks, read from TOML and validated key by key.

    [absolute]
    step_time_ms = 12.5        # mean step time
    peak_memory_mb = 2048
    copy_ratio = 0.10          # copy time / step time
    min_utilization = 0.60     # device busy time / step time
    launches_per_step = 400
    syncs_per_step = 2
    [absolute.op_type_time_ms] # device time per step of an op type
    MatMul = 3.0
    [relative]                 # against --baseline; growth allowed
    step_time = "2%"
    peak_memory = "5%"
    [relative.op_type_time]    # growth of op types' device time ("*": every op type)
    "*" = "10%"

A mistake (bad TOML, an unknown key, a value of the wrong type) raises :class:`BudgetError`,
whose message names the key and its line and suggests the closest known key.
"""

from __future__ import annotations

import difflib
import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprof_py.gates.check import (
    LIMITS,
    OP_TYPE_GROWTH,
    OP_TYPE_TIME,
    RELATIVE,
    RELATIVE_ALIASES,
    Check,
    check_absolute,
    check_relative,
    parse_growth,
)
from msprof_py.gates.figures import GateFigures
from msprof_py.safe_text import toml_string, visible

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ABSOLUTE = "absolute"
RELATIVE_SECTION = "relative"
#: a budget file larger than this is refused before it is parsed (a real one is a few KiB)
MAX_BUDGET_BYTES = 1024 * 1024
#: op types a budget may limit, per table (a model has a few hundred op types)
MAX_OP_TYPE_KEYS = 10_000
#: absolute keys whose value is a fraction of the step (0..1)
FRACTIONS = ("copy_ratio", "min_utilization")


class BudgetError(ValueError):
    """A budget file that cannot be used; ``key`` and ``line`` (1-based) when known."""

    def __init__(self, message: str, key: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.line = line


@dataclass(frozen=True)
class Budget:
    """Validated limits: absolute ones (budget key -> limit), per-op-type device time (ms per
    step), relative growth allowed against a baseline (key -> fraction) and per op type."""

    absolute: dict[str, float] = field(default_factory=dict)
    op_type_time_ms: dict[str, float] = field(default_factory=dict)
    relative: dict[str, float] = field(default_factory=dict)
    op_type_growth: dict[str, float] = field(default_factory=dict)
    source: str = "<budget>"

    @property
    def needs_baseline(self) -> bool:
        """Whether the budget has relative limits (a gate then needs a baseline)."""
        return bool(self.relative or self.op_type_growth)

    def relative_keys(self) -> list[str]:
        """The relative keys, as written (``op_type_time.MatMul`` for op types)."""
        return [*self.relative, *(f"{OP_TYPE_GROWTH}.{t}" for t in self.op_type_growth)]

    def check(self, figs: GateFigures, baseline: GateFigures | None = None) -> list[Check]:
        """Every check of this budget on ``figs`` (relative ones need ``baseline``)."""
        checks = check_absolute(figs, self.absolute, self.op_type_time_ms)
        if self.needs_baseline:
            if baseline is None:
                raise BudgetError("the budget has relative limits; they need a baseline", key=None)
            checks += check_relative(figs, baseline, self.relative, self.op_type_growth)
        return checks


def load_budget(path: str | Path) -> Budget:
    """Read and validate the budget file ``path``."""
    path = Path(path)
    try:
        size = path.stat().st_size if path.is_file() else 0
        if size > MAX_BUDGET_BYTES:
            raise BudgetError(
                f"{path}: the budget file is {size:,} bytes, more than the "
                f"{MAX_BUDGET_BYTES:,} a budget may have (is it a budget file?)"
            )
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BudgetError(f"{path}: no such budget file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BudgetError(f"{path}: cannot read the budget file ({exc})") from None
    return parse_budget(text, str(path))


def parse_budget(text: str, source: str = "<budget>") -> Budget:
    """Validate the TOML ``text`` of a budget (``source`` names it in errors)."""
    if len(text) > MAX_BUDGET_BYTES:
        raise BudgetError(
            f"{source}: the budget is {len(text):,} characters, more than the "
            f"{MAX_BUDGET_BYTES:,} a budget may have"
        )
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None) or _line_from_message(str(exc))
        reason = getattr(exc, "msg", None) or re.sub(r"\s*\(at line.*\)$", "", str(exc))
        where = f", line {line}" if line else ""
        raise BudgetError(f"{source}{where}: not valid TOML: {reason}", line=line) from None
    lines = _Lines(text)

    def fail(message: str, section: str, key: str | None) -> BudgetError:
        line = lines.find(section, key)
        where = f", line {line}" if line else ""
        return BudgetError(f"{source}{where}: {message}", key=key or section, line=line)

    for section in raw:
        if section not in (ABSOLUTE, RELATIVE_SECTION):
            hint = _suggest(section, (ABSOLUTE, RELATIVE_SECTION))
            raise fail(
                f"unknown section [{section}]{hint} (a budget has [absolute] and [relative])",
                section,
                None,
            )
        if not isinstance(raw[section], dict):
            raise fail(f"'{section}' must be a table: [{section}]", "", section)
    absolute, op_types = _absolute(raw.get(ABSOLUTE, {}), fail)
    relative, growth = _relative(raw.get(RELATIVE_SECTION, {}), fail)
    budget = Budget(absolute, op_types, relative, growth, source)
    if not (absolute or op_types or budget.needs_baseline):
        raise BudgetError(
            f"{source}: the budget sets no limits; add keys under [absolute] or [relative] "
            "(msprof gate DIR --init-budget FILE writes a first one)"
        )
    return budget


def _absolute(table: dict[str, Any], fail: Any) -> tuple[dict[str, float], dict[str, float]]:
    absolute: dict[str, float] = {}
    op_types: dict[str, float] = {}
    for key, value in table.items():
        if key == OP_TYPE_TIME:
            if not isinstance(value, dict):
                raise fail(
                    f"[absolute] {key} must be a table of op type = ms per step, "
                    f"e.g. [absolute.{key}] MatMul = 3.0",
                    ABSOLUTE,
                    key,
                )
            _few(value, f"[absolute.{key}]", fail, f"{ABSOLUTE}.{key}")
            for op_type, limit in value.items():
                op_types[op_type] = _number(
                    limit, f"[absolute.{key}] {op_type}", f"{ABSOLUTE}.{key}", op_type, fail
                )
            continue
        if key not in LIMITS:
            known = [*LIMITS, OP_TYPE_TIME]
            hint = _suggest(key, known)
            if key in RELATIVE or key in RELATIVE_ALIASES:
                hint += " (or move it to [relative] if it is a growth against a baseline)"
            raise fail(f"unknown key '{key}' in [absolute]{hint}", ABSOLUTE, key)
        number = _number(value, f"[absolute] {key}", ABSOLUTE, key, fail)
        if key in FRACTIONS and number > 1:
            raise fail(
                f"[absolute] {key} is a fraction of the step between 0 and 1 "
                f"(10% is 0.10), got {value!r}",
                ABSOLUTE,
                key,
            )
        absolute[key] = number
    return absolute, op_types


def _relative(table: dict[str, Any], fail: Any) -> tuple[dict[str, float], dict[str, float]]:
    relative: dict[str, float] = {}
    growth: dict[str, float] = {}
    for key, value in table.items():
        if key == OP_TYPE_GROWTH:
            if not isinstance(value, dict):
                raise fail(
                    f"[relative] {key} must be a table of op type = allowed growth, "
                    f'e.g. [relative.{key}] MatMul = "5%"',
                    RELATIVE_SECTION,
                    key,
                )
            section = f"{RELATIVE_SECTION}.{key}"
            _few(value, f"[{section}]", fail, section)
            for op_type, amount in value.items():
                growth[op_type] = _growth(amount, f"[{section}] {op_type}", section, op_type, fail)
            continue
        if key not in RELATIVE and key not in RELATIVE_ALIASES:
            known = [*RELATIVE, OP_TYPE_GROWTH]
            hint = _suggest(key, [*known, *RELATIVE_ALIASES])
            if key in LIMITS:
                hint += " ([absolute] takes limits such as this one)"
            raise fail(f"unknown key '{key}' in [relative]{hint}", RELATIVE_SECTION, key)
        relative[key] = _growth(value, f"[relative] {key}", RELATIVE_SECTION, key, fail)
    return relative, growth


def _few(table: dict[str, Any], name: str, fail: Any, section: str) -> None:
    if len(table) > MAX_OP_TYPE_KEYS:
        raise fail(
            f"{name} has {len(table):,} op types, more than the {MAX_OP_TYPE_KEYS:,} a budget "
            "may limit",
            section,
            None,
        )


def _number(value: Any, name: str, section: str, key: str, fail: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(f"{name} must be a number, got {_shown(value)}", section, key)
    if not math.isfinite(value) or value < 0:
        raise fail(f"{name} must be a finite number >= 0, got {value!r}", section, key)
    return float(value)


def _growth(value: Any, name: str, section: str, key: str, fail: Any) -> float:
    try:
        return parse_growth(value)
    except ValueError as exc:
        raise fail(f"{name}: {exc}", section, key) from None


def _shown(value: Any) -> str:
    kind = {str: "a string", bool: "a boolean", list: "an array", dict: "a table"}.get(
        type(value), type(value).__name__
    )
    return f"{value!r} ({kind})"


def _suggest(word: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def _line_from_message(message: str) -> int | None:
    match = re.search(r"line (\d+)", message)
    return int(match.group(1)) if match else None


_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")


def _key_pattern(key: str) -> re.Pattern[str]:
    quoted = re.escape(key)
    return re.compile(rf"""^\s*(?:{quoted}|"{quoted}"|'{quoted}')\s*[=.]""")


class _Lines:
    """Finds the line of a key in the text of a TOML file (for error messages)."""

    def __init__(self, text: str) -> None:
        self.entries: list[tuple[int, str, str]] = []  # (line number, table, line text)
        table = ""
        for number, line in enumerate(text.splitlines(), start=1):
            match = _HEADER.match(line)
            if match:
                table = re.sub(r"""\s*\.\s*""", ".", match.group(1)).replace('"', "")
                self.entries.append((number, "[header]", table))
                continue
            self.entries.append((number, table, line))

    def find(self, section: str, key: str | None) -> int | None:
        """The line of ``key`` in table ``section`` (of the header ``[section]`` when key is
        None); a dotted or inline spelling elsewhere is found too."""
        if key is None:
            return next(
                (n for n, kind, t in self.entries if kind == "[header]" and t == section), None
            )
        own = _key_pattern(key)
        for number, table, line in self.entries:
            if table == section and own.match(line):
                return number
        if f"{section}.{key}".strip(".") in {
            t for _, kind, t in self.entries if kind == "[header]"
        }:
            return self.find(f"{section}.{key}".strip("."), None)
        parts = [*section.split("."), key] if section else [key]
        for i in range(len(parts) - 1, -1, -1):
            prefix, rest = ".".join(parts[:i]), ".".join(parts[i:])
            dotted = _key_pattern(rest)
            for number, table, line in self.entries:
                if table == prefix and dotted.match(line):
                    return number
        word = re.compile(rf"(^|[\s{{,.\"']){re.escape(key)}([\s=.\"']|$)")
        for number, table, line in self.entries:
            if table != "[header]" and word.search(line.split("#", 1)[0]):
                return number
        return None


def init_budget(figs: Iterable[GateFigures], headroom: float = 0.10, op_types: int = 5) -> str:
    """A first budget file (TOML text) from current figures: every absolute limit at the
    current value plus ``headroom`` (ceilings raised, the utilisation floor lowered), the
    ``op_types`` op types with the most device time, and relative limits commented out.
    Several ranks: the worst rank sets each limit."""
    figs = list(figs)
    if not figs:
        raise ValueError("no figures to write a budget from")
    keys = {
        "step_time_ms": "mean step time",
        "device_time_ms": "device busy time per step",
        "peak_memory_mb": "peak reserved device memory (MiB)",
        "copy_ratio": "copy time / step time",
        "min_utilization": "device busy time / step time",
        "launches_per_step": "kernel launches per step",
        "syncs_per_step": "host synchronisations per step",
    }
    source = figs[0]
    lines = [
        "# msprof gate budget (msprof gate DIR --budget THIS_FILE)",
        # comments end at a newline: profile strings in them are shown escaped
        f"# written from {len(figs)} rank(s), device {visible(source.device or '?')}, "
        f"{source.steps} analysed step(s), host time {visible(source.host_time)}; "
        f"headroom {headroom:.0%}",
        "",
        "[absolute]",
    ]
    for key, comment in keys.items():
        limit = LIMITS[key]
        values = [float(getattr(f, limit.figure)) for f in figs]
        if limit.ceiling:
            value = _round(max(values) * (1 + headroom), up=True)
        else:
            value = _round(min(values) * (1 - headroom), up=False)
        if key in FRACTIONS:
            value = min(1.0, value)
        if key in ("launches_per_step", "syncs_per_step"):
            value = float(math.ceil(value))
        lines.append(f"{key} = {_toml_number(value)}".ljust(32) + f"# {comment}")
    totals: dict[str, float] = {}
    for f in figs:
        for op_type, ms in f.op_type_time_ms.items():
            totals[op_type] = max(totals.get(op_type, 0.0), ms)
    top = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:op_types]
    if top:
        lines += ["", f"[absolute.{OP_TYPE_TIME}]".ljust(32) + "# device time per step (ms)"]
        for op_type, ms in top:
            name = op_type if re.fullmatch(r"[A-Za-z0-9_-]+", op_type) else toml_string(op_type)
            lines.append(f"{name} = {_toml_number(_round(ms * (1 + headroom), up=True))}")
    lines += [
        "",
        "# [relative]                    # against --baseline DIR; growth allowed",
        '# step_time = "2%"',
        '# peak_memory = "5%"',
        "",
    ]
    return "\n".join(lines)


def _round(value: float, up: bool) -> float:
    """``value`` to 4 significant digits, rounded away from the figure (a lenient limit)."""
    if value <= 0:
        return 0.0
    scale = 10 ** (math.floor(math.log10(value)) - 3)
    steps = value / scale
    steps = math.ceil(steps - 1e-9) if up else math.floor(steps + 1e-9)
    return float(f"{steps * scale:.6g}")


def _toml_number(value: float) -> str:
    text = f"{value:.6g}"
    return text if any(c in text for c in ".e") else f"{text}.0"
