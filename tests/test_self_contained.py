"""A clone of the repository stands alone: no tracked file points outside it.

Two checks over every tracked text file (``git ls-files``; files with NUL bytes or that are not
UTF-8 are skipped as binary):

* no reference to a place outside the repository: an absolute path into the development
  machine's work folder, the shared research folder of the project's set-up or the names of
  its notes, an architecture page other than ``docs/architecture.md``, or a relative path whose
  leading ``../`` climb above the repository root from the file's own folder (``../x`` inside
  the repository, as code that builds paths within it writes, is fine);
* every relative Markdown link of ``README.md`` and ``docs/*.md`` resolves to a file in the
  repository, and a ``#fragment`` into a Markdown file names one of its headings.

The patterns below are written with character classes so that this file does not match them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: (pattern, what it is) for references to places outside the repository
OUTSIDE = [
    (re.compile(r"(?<![\w.~/-])/w[o]rk/"), "absolute path into the machine's work folder"),
    (re.compile(r"\bshare[d]/(?:reference|seed|hooks)\b"), "the shared research folder"),
    (re.compile(r"(?<![\w.])\.\.[/\\]share[d]\b"), "the shared folder beside the clone"),
    (
        re.compile(
            r"\b(?:npu-device-f[a]cts|profile-form[a]ts\.md|analysis-anch[o]rs"
            r"|wave2-f[a]cts|torch-python-backen[d]\.md)\b"
        ),
        "a research note that is not in the repository",
    ),
    (
        re.compile(r"(?<!docs/)\bARCHITECTUR[E]\.md\b"),
        "an architecture page (docs/architecture.md)",
    ),
]
#: a relative path starting with one or more ``../`` (not the tail of a longer path)
CLIMB = re.compile(r"(?<![\w./\\-])((?:\.\./)+)")
#: Markdown links and images: ``[text](target)``, ``![alt](target "title")``
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def _tracked() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [name for name in out.decode("utf-8").split("\0") if name]


def _text(path: Path) -> str | None:
    """The file's text, or None for a binary (NUL bytes, not UTF-8) or missing file."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def outside_references(rel: str, text: str) -> list[str]:
    """``file:line: what`` for every reference of ``text`` (the file ``rel``) outside the repo."""
    depth = len(Path(rel).parent.parts)
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, what in OUTSIDE:
            if pattern.search(line):
                found.append(f"{rel}:{number}: {what}: {line.strip()[:120]}")
        for match in CLIMB.finditer(line):
            if match.group(1).count("../") > depth:
                found.append(
                    f"{rel}:{number}: relative path climbs out of the repository: "
                    f"{line.strip()[:120]}"
                )
    return found


def test_no_tracked_file_refers_outside_the_repository() -> None:
    problems = []
    for rel in _tracked():
        text = _text(ROOT / rel)
        if text is not None:
            problems += outside_references(rel, text)
    assert not problems, "references outside the repository:\n" + "\n".join(problems)


def heading_slugs(text: str) -> set[str]:
    """GitHub's anchors of a Markdown text's headings (lower case, punctuation dropped, spaces
    to hyphens; repeated headings get ``-1``, ``-2`` ...)."""
    slugs: set[str] = set()
    for line in FENCE.sub("", text).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        unique, n = slug, 0
        while unique in slugs:
            n += 1
            unique = f"{slug}-{n}"
        slugs.add(unique)
    return slugs


def _slugs_of(path: Path) -> set[str]:
    return heading_slugs(path.read_text(encoding="utf-8"))


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: target`` for each relative link of the Markdown file ``path`` that does
    not resolve to a file under ``root`` (or to a heading of it, for a fragment)."""
    text = path.read_text(encoding="utf-8")
    # links inside code are examples, not links: blank them out but keep the line numbers
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    prose = INLINE_CODE.sub("``", prose)
    rel = path.relative_to(root).as_posix()
    broken = []
    for number, line in enumerate(prose.splitlines(), 1):
        for match in LINK.finditer(line):
            target = match.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto: ...
                continue
            name, _, fragment = target.partition("#")
            dest = (path.parent / name).resolve() if name else path
            if not dest.is_relative_to(root) or not dest.is_file():
                broken.append(f"{rel}:{number}: {target}: no such file in the repository")
            elif fragment and dest.suffix == ".md" and fragment not in _slugs_of(dest):
                broken.append(f"{rel}:{number}: {target}: no heading #{fragment}")
    return broken


def test_markdown_links_of_the_readme_and_docs_resolve() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = [b for page in pages for b in broken_links(page)]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    """The two checks fail on the mistakes they exist for (and only on those)."""
    work = "/w" + "ork/"
    up = "../"  # built, so that this file does not climb out of the repository itself
    bad = {
        "README.md": f"see {work}shared/x",
        "docs/a.md": "facts in ../" + "shar" + "ed/reference/x.md",
        "docs/b.md": "see " + up * 2 + "elsewhere/notes.md",
        "x.py": "# design: " + "ARCHITECTURE" + ".md",
    }
    good = {
        "docs/c.md": "see ../benchmarks/RESULTS.md and docs/" + "ARCHITECTURE" + ".md",
        "tests/d/e.py": 'hostile = "'
        + up * 2
        + 'etc/passwd"; url = "https://example.com'
        + work
        + 'x"',
        "msprof_py/f.py": "a value such as ``../x`` stays inside",
    }
    for rel, text in bad.items():
        assert outside_references(rel, text), rel
    for rel, text in good.items():
        assert not outside_references(rel, text), rel

    root = tmp_path.resolve()
    (root / "docs").mkdir()
    (root / "docs" / "architecture.md").write_text("# Layers\n", encoding="utf-8")
    page = root / "docs" / "probe.md"
    page.write_text(
        "# Title here\n[ok](architecture.md#layers) [ok](#title-here) [web](https://x.org/a.md)\n"
        "`[code](missing.md)`\n[bad](missing.md)\n[bad](architecture.md#no-such-heading)\n"
        "[bad](" + up * 2 + "outside.md)\n",
        encoding="utf-8",
    )
    found = broken_links(page, root)
    assert [f.split(": ")[0].rsplit(":", 1)[1] for f in found] == ["4", "5", "6"], found


SOURCE_KEY = re.compile(r"\bS\d+b?\b")


def _legend_keys(text: str) -> set[str]:
    """Keys a Markdown Sources table (``| S1 | ...``) or a preset's header comment
    (``#  S1  ...``) defines."""
    keys = set(re.findall(r"^\|\s*(S\d+b?)\s*\|", text, re.M))
    for line in re.findall(r"^#\s+(S\d+b?\s.*)$", text, re.M):
        keys.update(re.findall(r"(?:^|; )(S\d+b?)\s", line))
    return keys


def test_every_source_key_of_the_presets_names_a_public_document() -> None:
    """A ``source`` that cites S1, S9 ... cites a key the preset's header and
    docs/device-model.md (section Sources) resolve to a public document."""
    docs = _legend_keys((ROOT / "docs" / "device-model.md").read_text(encoding="utf-8"))
    docs |= {k + "b" for k in docs}  # S7 / S7b share a row
    presets = sorted((ROOT / "msprof_py" / "device" / "presets").glob("*.toml"))
    assert presets
    missing = []
    for path in presets:
        text = path.read_text(encoding="utf-8")
        header = _legend_keys(text)
        cited = set()
        for source in re.findall(r'source\s*=\s*"([^"]*)"', text):
            cited.update(SOURCE_KEY.findall(source))
        missing += [f"{path.name}: {k} not in its header" for k in sorted(cited - header)]
        missing += [f"{path.name}: {k} not in docs/device-model.md" for k in sorted(cited - docs)]
    assert not missing, "\n".join(missing)
