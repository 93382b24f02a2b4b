"""``results/`` stays a curated folder: under ``MAX_LINES`` lines, every file listed in ``results/README.md``
(its run, command, commit and machine), and every ``results/`` path the docs name still there. Planted folders
prove each rule can fail. Nothing here runs a kernel."""

import fnmatch
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAX_LINES = 15_000  # the latest run per benchmark; a raw log that grows it belongs in git history


def count_lines(root):
    """Newlines in every file under ``root``, as ``wc -l`` counts them (figures included)."""
    return sum(p.read_bytes().count(b"\n") for p in root.rglob("*") if p.is_file())


def expand(token):
    """``a/b.{csv,json}`` -> ``a/b.csv``, ``a/b.json``."""
    match = re.search(r"\{([^{}]*)\}", token)
    if not match:
        return [token]
    return [t for part in match.group(1).split(",")
            for t in expand(token[:match.start()] + part + token[match.end():])]


def listed_patterns(readme_text):
    """The file patterns a README's table cells name; a name without a folder is in the folder named before it."""
    patterns = []
    for line in readme_text.splitlines():
        for cell in line.split("|"):
            folder = ""
            for token in re.findall(r"`([^`]+)`", cell):
                if " " in token:
                    continue
                if "/" in token:
                    folder = token.rsplit("/", 1)[0]
                elif folder:
                    token = f"{folder}/{token}"
                else:
                    continue
                for name in expand(token):
                    patterns.append(name + "*" if name.endswith("/") else name)
    return patterns


def unlisted(root):
    """Files under ``root`` that its README.md does not name (by path, pattern or folder)."""
    patterns = listed_patterns((root / "README.md").read_text())
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p != root / "README.md")
    return [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)]


def missing_links(texts, root=ROOT):
    """``results/`` paths the texts name (a file, a folder or a glob) that are not in the tree; a path after
    ``--out`` is where a command would write, not a link."""
    missing = []
    for text in texts:
        for match in re.finditer(r"(--out )?(results/[A-Za-z0-9_./*{},-]+)", text):
            path = match.group(2).rstrip(".,")
            if match.group(1) or path == "results/":
                continue
            if not any(any(root.glob(p)) or (root / p).exists() for p in expand(path)):
                missing.append(path)
    return missing


def test_results_stay_under_the_line_limit():
    lines = count_lines(RESULTS)
    assert lines < MAX_LINES, (f"results/ holds {lines} lines, over {MAX_LINES}: keep the latest run per benchmark "
                               f"(earlier ones are in git history) and drop raw logs no table in docs/results.md "
                               f"reads")


def test_every_result_file_is_listed_in_the_readme():
    assert not unlisted(RESULTS), (f"results/README.md does not list {unlisted(RESULTS)}: add a row (files, "
                                   f"command, commit, machine) or remove the file")


def test_every_results_path_the_docs_name_exists():
    missing = missing_links(p.read_text() for p in DOCS)
    assert not missing, f"the docs name results/ paths that are not there: {missing}; fix the link or the file"


def test_the_rules_catch_planted_violations(tmp_path):
    (tmp_path / "big.log").write_text("x\n" * (MAX_LINES + 1))
    assert count_lines(tmp_path) > MAX_LINES
    run = tmp_path / "2xGPU" / "ccl"
    run.mkdir(parents=True)
    for name in ("ccl.csv", "ccl.json", "ccl_latency.png", "stray.log"):
        (run / name).write_text("a\n")
    (tmp_path / "README.md").write_text("| ccl | `2xGPU/ccl/ccl.{csv,json}`, `ccl_latency.png` | `python x.py` |\n")
    assert unlisted(tmp_path) == ["2xGPU/ccl/stray.log", "big.log"]
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "here.log").write_text("a\n")
    text = "raw: `results/here.log`, `results/gone.log`; run `bench.py --out results/later/`"
    assert missing_links([text], root=tmp_path) == ["results/gone.log"]
