"""The docs site builds with `mkdocs build --strict`, and the README stays short.

The site is built once per module into a temporary folder; the tests then read
the HTML it wrote. The build analyses the sources statically (griffe), so it
needs no backend and runs in one pass only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import keras_selfattn

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
QUICK_START = (
    'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[demo]" '
    "&& keras-selfattn train",
    'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[test]" '
    "&& python tests/run_backends.py",
)
README_MAX_LINES = 150

pytestmark = pytest.mark.backend_independent


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site of `mkdocs build --strict` (warnings are errors)."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def _object_html(page: str, object_id: str) -> str:
    """The HTML of one documented object: its heading up to the next object's."""
    start = page.index(f'<h3 id="{object_id}"')
    following = page.find("<h3 id=", start + 1)
    return page[start : following if following != -1 else len(page)]


@pytest.mark.slow
def test_site_builds_strict(site):
    pages = ("index.html", "layers/index.html", "math/index.html")
    for page in (*pages, "demo-api/index.html"):
        assert (site / page).is_file(), page
    notebooks = sorted(p.parent.name for p in site.glob("notebooks/*/index.html"))
    assert notebooks == [p.stem for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]


@pytest.mark.slow
def test_links_on_the_notebook_pages_resolve(site):
    # `mkdocs build --strict` checks the Markdown pages' links, not those of
    # the notebooks it renders: four of them pointed nowhere until
    # 2026-12-08 (`../demo.md` from /notebooks/03_imdb_sentiment/).
    for page in sorted(site.glob("notebooks/*/index.html")):
        html = page.read_text(encoding="utf-8")
        body = html[html.index('<div class="jp-Notebook') :]
        for link in re.findall(r'<a href="([^"#:]+)(?:#[^"]*)?"', body):
            target = (page.parent / link).resolve()
            target = target / "index.html" if link.endswith("/") else target
            assert target.is_file(), (page.parent.name, link)


@pytest.mark.slow
def test_call_arguments_render_as_a_section(site):
    page = (site / "layers" / "index.html").read_text()
    html = _object_html(page, "keras_selfattn.SelfAttention")
    match = re.search(
        r'doc-section-title">Call arguments:?</span></p>\s*<table>(.*?)</table>',
        html,
        re.DOTALL,
    )
    assert match, "no Call arguments section with a table on SelfAttention"
    table = match.group(1)
    for argument in ("inputs", "mask", "training", "return_attention_scores"):
        assert f"<code>{argument}</code>" in table, argument
    # The section is not left as running text (an admonition) as well.
    assert "Call arguments:</p>" not in html
    assert 'class="admonition call-arguments"' not in html


@pytest.mark.slow
def test_api_reference_documents_every_public_name(site):
    page = (site / "layers" / "index.html").read_text()
    ids = set(re.findall(r'id="([^"]+)"', page))
    for name in keras_selfattn.__all__:
        documented = {i for i in ids if i == name or i.endswith(f".{name}")}
        assert documented, f"{name} is not in the API reference"


def test_readme_is_short_and_has_both_quick_start_commands():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)
    for command in QUICK_START:
        assert command in lines, command
    # `.ci/run` runs the test command it finds with this pattern.
    pattern = re.compile(r"^python3 -m venv .* tests/run_backends\.py$")
    assert [line for line in lines if pattern.match(line)] == [QUICK_START[1]]
