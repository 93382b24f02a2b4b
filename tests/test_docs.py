"""The documentation site (``docs/``): every public name has an entry in the API reference and a docstring, every
collective of ``ctx.ccl`` has its entry, and the site builds with warnings as errors, its internal links resolving and
its search index finding the collectives."""

import html.parser
import inspect
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import iris
from iris.ccl import record

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
API = DOCS / "api"
# Names that are plain values, documented in prose on their page rather than by autodoc
VALUES = {"DEBUG", "INFO", "WARNING", "ERROR", "mem"}


def api_text():
    return "\n".join(p.read_text() for p in sorted(API.glob("*.md")))


def documented(name, text):
    """Whether ``iris.<name>`` has an autodoc entry (or, for a plain value, a mention) in the API pages."""
    if re.search(rf"^\.\. auto\w+:: iris\.{re.escape(name)}$", text, re.M):
        return True
    return name in VALUES and f"`iris.{name}`" in text


def test_every_public_name_has_an_entry_and_a_docstring():
    text = api_text()
    missing = [name for name in iris.__all__ if not documented(name, text)]
    assert missing == [], f"public names without an entry in docs/api/: {missing}"
    undocumented = [name for name in iris.__all__ if name not in VALUES and not inspect.getdoc(
        getattr(getattr(iris, name), "fn", getattr(iris, name)))]
    assert undocumented == [], f"public names without a docstring: {undocumented}"


def test_every_collective_has_an_entry():
    text = (API / "ccl.md").read_text()
    missing = [r.name for r in record.records() if f".. autofunction:: iris.ccl.{r.name}\n" not in text]
    assert missing == [], f"collectives without an entry in docs/api/ccl.md: {missing}"


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("sphinx", reason="the site's tools are not installed: pip install -e '.[docs]'")
    for module in ("myst_parser", "sphinx_gallery", "furo"):
        pytest.importorskip(module, reason="the site's tools are not installed: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "IRIS_BACKEND": "cpu"}
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
                           str(out)], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, f"the site did not build cleanly:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return out


def test_the_site_builds_and_its_links_resolve(site):
    pages = sorted(site.rglob("*.html"))
    assert (site / "index.html") in pages and (site / "api" / "ccl.html") in pages
    assert any(p.parent.name == "tutorials" for p in pages), "no tutorial page"
    parsed = {}
    for page in pages:
        links = _Links()
        links.feed(page.read_text(errors="replace"))
        parsed[page] = links
    broken = []
    for page, links in parsed.items():
        for href in links.links:
            if re.match(r"^[a-z]+:", href) or href.startswith("#") and not href[1:]:
                continue  # another site, mailto:, or the page's top
            target, _, anchor = href.partition("#")
            path = (page.parent / target).resolve() if target else page
            if path.is_dir():
                path = path / "index.html"
            if not path.exists():
                broken.append(f"{page.relative_to(site)}: {href}")
            elif anchor and path.suffix == ".html" and path in parsed and anchor not in parsed[path].ids:
                broken.append(f"{page.relative_to(site)}: {href} (no such anchor)")
    assert broken == [], "broken internal links:\n" + "\n".join(broken[:40])


def test_search_finds_the_collectives(site):
    index = (site / "searchindex.js").read_text()
    assert "all_reduce" in index and "reduce_scatter_v" in index
    ccl = (site / "api" / "ccl.html").read_text()
    assert 'id="iris.ccl.all_reduce"' in ccl, "ccl.all_reduce has no entry (anchor) on its page"


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium on this machine (Debian: apt-get install chromium); the site is still built and its "
                "links checked by the tests above")


def _browse(chromium, url, *extra):
    """What headless Chromium shows of ``url`` after its scripts ran: the DOM (``--dump-dom``) or, with
    ``--screenshot=PATH``, nothing on stdout."""
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           "--allow-file-access-from-files", "--virtual-time-budget=8000", "--window-size=1280,1000",
                           *extra, url], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_site_in_a_browser(site, tmp_path):
    """As a person would: the index renders, a search for all_reduce lists its page, a tutorial shows its code and
    its figure; screenshots of the index and of that tutorial come out as images."""
    chromium = _chromium()
    index = _browse(chromium, (site / "index.html").as_uri(), "--dump-dom")
    assert "symmetric heap" in index and "Getting started" in index, index[:2000]
    found = _browse(chromium, (site / "search.html").as_uri() + "?q=all_reduce", "--dump-dom")
    results = found[found.find('id="search-results"'):]
    assert "api/ccl.html" in results and "iris.ccl.all_reduce" in results, results[:3000]
    tutorial = _browse(chromium, (site / "tutorials" / "04_fused_gemm.html").as_uri(), "--dump-dom")
    code = re.sub(r"<[^>]+>", "", tutorial[tutorial.find('class="highlight'):])  # the highlighted code as text
    assert 'class="highlight' in tutorial and "ctx.ops.matmul_all_gather(out" in code, code[:2000]
    image = re.search(r'<img[^>]+src="([^"]*trace_gemm_all_scatter[^"]*\.png)"', tutorial)
    assert image and (site / "tutorials" / image.group(1)).resolve().exists(), "the tutorial's figure is missing"
    for name, page in (("index", site / "index.html"), ("tutorial", site / "tutorials" / "04_fused_gemm.html")):
        shot = tmp_path / f"{name}.png"
        _browse(chromium, page.as_uri(), f"--screenshot={shot}")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000, (name, shot.stat())
