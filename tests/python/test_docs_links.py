"""The user guide's link checker (tests/docs/check_links.py) passes a book whose links all
land, and fails naming each kind of broken link: a missing page, a missing #anchor, a link out
of the book to a repository file that does not exist."""

import pathlib
import subprocess
import sys

CHECKER = pathlib.Path(__file__).resolve().parents[1] / "docs" / "check_links.py"


def build(tmp_path, chapter_body):
    """A two-page book in tmp_path/repo/target/book, its sources in tmp_path/repo/docs/src."""
    repo = tmp_path / "repo"
    (repo / "configs").mkdir(parents=True)
    (repo / "configs" / "evb.toml").write_text("[evb]\n")
    (repo / "docs" / "src").mkdir(parents=True)
    book = repo / "target" / "book"
    book.mkdir(parents=True)
    (book / "index.html").write_text('<h1 id="top">t</h1><a href="chapter.html#run-numbers">c</a>')
    (book / "chapter.html").write_text(f'<h2 id="run-numbers">r</h2>{chapter_body}')
    return book, repo / "docs" / "src"


def check(book, source):
    return subprocess.run(
        [sys.executable, str(CHECKER), str(book), str(source)], capture_output=True, text=True
    )


def test_a_book_whose_links_all_land_passes(tmp_path):
    book, source = build(
        tmp_path,
        '<a href="index.html#top">i</a><a href="#run-numbers">s</a>'
        '<a href="../../configs/evb.toml">c</a><a href="../../configs">d</a>'
        '<a href="https://example.org/x">e</a>',
    )
    result = check(book, source)
    assert result.returncode == 0, result.stdout
    assert "0 broken links, 1 external" in result.stdout
    assert "external (not fetched): https://example.org/x" in result.stdout


def test_each_broken_link_is_named(tmp_path):
    book, source = build(
        tmp_path,
        '<a href="missing.html">m</a><a href="index.html#nowhere">a</a>'
        '<a href="../../configs/gone.toml">g</a><img src="figure.png">',
    )
    result = check(book, source)
    assert result.returncode == 1
    broken = [line for line in result.stdout.splitlines() if line.startswith("BROKEN")]
    assert len(broken) == 4, result.stdout
    for link in ("missing.html", "index.html#nowhere", "../../configs/gone.toml", "figure.png"):
        assert any(f" {link}: " in line for line in broken), (link, result.stdout)


def test_a_link_out_of_the_book_resolves_from_its_source_not_the_build_dir(tmp_path):
    # Built elsewhere (CARGO_TARGET_DIR), ../../configs/evb.toml still means the repository's.
    book, source = build(tmp_path, '<a href="../../configs/evb.toml">c</a>')
    moved = tmp_path / "elsewhere" / "deep" / "book"
    moved.parent.mkdir(parents=True)
    book.rename(moved)
    assert check(moved, source).returncode == 0


def test_a_markdown_file_beside_the_book_has_its_links_checked(tmp_path):
    book, source = build(tmp_path, "")
    readme = tmp_path / "repo" / "README.md"
    readme.write_text(
        "[guide](docs/src)\n[gone](docs/src/moved.md)\n```\n[not a link](nowhere.md)\n```\n"
    )
    result = subprocess.run(
        [sys.executable, str(CHECKER), str(book), str(source), str(readme)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    broken = [line for line in result.stdout.splitlines() if line.startswith("BROKEN")]
    assert len(broken) == 1 and "docs/src/moved.md" in broken[0], result.stdout
