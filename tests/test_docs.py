"""The documentation: a short README whose links resolve, and a docs/ site that MkDocs builds
with --strict (no broken link, anchor or nav entry, no page left out of the nav)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_README_LINES = 150

# [text](target) and <a href="target">, outside code: what GitHub renders as a link.
_LINK = re.compile(
    r"\[[^\]]*\]\(\s*(?:<([^>]+)>|([^)\s]+))(?:\s+\"[^\"]*\")?\s*\)|href=\"([^\"]+)\""
)
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")


def relative_links(markdown: str) -> list[str]:
    """The relative link targets of a Markdown text (no URL scheme, no in-page anchor), without
    their `#anchor`, in order."""
    text = _CODE.sub("", _FENCE.sub("", markdown))
    targets = ["".join(groups) for groups in _LINK.findall(text)]
    return [
        t.split("#", 1)[0]
        for t in targets
        if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I) and not t.startswith("#")
    ]


def test_relative_links_are_found_outside_code_only():
    text = (
        "See [a](docs/a.md#x), [b](<docs/b c.md>), [web](https://x.org/y), [top](#usage),\n"
        '<a href="docs/c.md">c</a> and `[not](code.md)`.\n'
        "```\n[nor](fenced.md)\n```\n"
    )
    assert relative_links(text) == ["docs/a.md", "docs/b c.md", "docs/c.md"]


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


def test_every_relative_link_of_the_readme_points_to_a_file():
    links = relative_links(README.read_text(encoding="utf-8"))
    assert links, "README.md links to no page of the docs"
    missing = sorted({link for link in links if not (ROOT / link).exists()})
    assert missing == []


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.levelname}: {record.getMessage()}")


def test_the_site_builds_strictly_without_a_warning(tmp_path, monkeypatch):
    from mkdocs.commands.build import build
    from mkdocs.config import load_config
    from mkdocs.exceptions import Abort

    # pymdownx.snippets resolves its base path (the repository root) from the working folder.
    monkeypatch.chdir(ROOT)
    site = tmp_path / "site"
    config = load_config(config_file=str(ROOT / "mkdocs.yml"), site_dir=str(site))
    assert config.strict is True
    collect = _Collect()
    log = logging.getLogger("mkdocs")
    log.addHandler(collect)
    try:
        build(config)
    except Abort as e:
        pytest.fail(f"{e}\n" + "\n".join(collect.messages))
    finally:
        log.removeHandler(collect)
    assert collect.messages == []
    # Every page of docs/ was written, the included reliability table among them.
    docs = ROOT / "docs"
    for page in docs.rglob("*.md"):
        assert (site / page.relative_to(docs).with_suffix(".html")).is_file(), page
    reliability = (site / "reliability.html").read_text(encoding="utf-8")
    assert "Reliability cases and their outcomes" in reliability
    assert "--8&lt;--" not in reliability and "--8<--" not in reliability
    # opened from the file system: links name pages, and search has its index as a script
    index = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="getting-started.html"' in index
    assert (site / "search" / "search_index.js").is_file()
    # ... and its search worker runs in an iframe there (a Worker cannot start from file://),
    # by a script of the site, not the offline plugin's shim from unpkg.com: nothing is fetched
    assert '<script src="assets/javascripts/iframe-worker.js"></script>' in index
    assert (site / "assets" / "javascripts" / "iframe-worker.js").is_file()
    assert re.findall(r'<(?:script|img|iframe)[^>]* src="(?:https?:)?//[^"]*', index) == []
    sheets = re.findall(r'<link[^>]*rel="stylesheet"[^>]*>', index)
    assert sheets and [t for t in sheets if re.search(r'href="(?:https?:)?//', t)] == []


def test_the_docs_name_the_extras_make_install_installs():
    """README and getting started say what `make install` (and so `make demo`) puts in .venv."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    (extras,) = re.findall(r'pip install --no-compile -e "\.\[([a-z,]+)\]"', makefile)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"installs `.[{extras}]`" in readme
    started = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    names = extras.split(",")
    assert f"with the extras {', '.join(names[:-1])} and {names[-1]}" in started
