#!/usr/bin/env python3
"""Checks every link in a built HTML book (mdBook's output): each relative link must reach a
file that exists, and each #anchor an element with that id in its page. External http(s)
links are listed, not fetched (CI has no general internet). A link that leaves the book (to
the repository's configs, scripts, crates) is resolved from the page's Markdown source in
SOURCE_DIR, where it was written, so the book may be built anywhere. Exit status 1 names every
broken link. Markdown files named after them (the README, which points into the guide) have
their relative links checked too: each must reach a file or folder.
Usage: check_links.py BOOK_DIR SOURCE_DIR [MARKDOWN_FILE...]
"""

import html.parser
import os
import re
import sys
import urllib.parse

EXTERNAL_SCHEMES = ("http", "https", "mailto")
# mdBook's 404 page resolves its links against the site's root URL (a <base> tag), which a
# book read from disk has none of.
SKIPPED_PAGES = {"404.html"}


class PageLinks(html.parser.HTMLParser):
    """The links (a/link href, img/script src) and ids of one HTML page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links = []
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if attrs.get(key):
                self.ids.add(attrs[key])
        attr = {"a": "href", "link": "href", "img": "src", "script": "src"}.get(tag)
        if attr and attrs.get(attr) is not None:
            self.links.append((self.getpos()[0], attrs[attr]))


def parse(path, cache):
    if path not in cache:
        page = PageLinks()
        with open(path, encoding="utf-8") as f:
            page.feed(f.read())
        cache[path] = page
    return cache[path]


def check(book_dir, source_dir):
    """Returns (broken, external): lists of human-readable lines."""
    broken, external, cache = [], set(), {}
    for root, _dirs, files in os.walk(book_dir):
        for name in sorted(files):
            if not name.endswith(".html") or name in SKIPPED_PAGES:
                continue
            page_path = os.path.join(root, name)
            shown = os.path.relpath(page_path, book_dir)
            for line, link in parse(page_path, cache).links:
                url = urllib.parse.urlsplit(link)
                if url.scheme in EXTERNAL_SCHEMES:
                    external.add(link)
                    continue
                if url.scheme or url.netloc:
                    broken.append(f"{shown}:{line}: {link}: a scheme the book should not use")
                    continue
                target = page_path
                if url.path:
                    path = urllib.parse.unquote(url.path)
                    target = os.path.normpath(os.path.join(root, path))
                    if os.path.relpath(target, book_dir).startswith(os.pardir):
                        # A repository file or folder (a folder is a listing, not a page).
                        page_source_dir = os.path.join(source_dir, os.path.relpath(root, book_dir))
                        target = os.path.normpath(os.path.join(page_source_dir, path))
                    elif os.path.isdir(target):
                        target = os.path.join(target, "index.html")
                if not os.path.exists(target):
                    broken.append(f"{shown}:{line}: {link}: no such file ({target})")
                    continue
                anchor = urllib.parse.unquote(url.fragment)
                if anchor and target.endswith(".html") and anchor not in parse(target, cache).ids:
                    broken.append(f"{shown}:{line}: {link}: no #{anchor} in {os.path.basename(target)}")
    return broken, sorted(external)


MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def check_markdown(path):
    """The broken relative links of one Markdown file (fenced code left out)."""
    broken, external, in_fence = [], set(), False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                in_fence = not in_fence
            if in_fence:
                continue
            for link in MARKDOWN_LINK.findall(line):
                url = urllib.parse.urlsplit(link)
                if url.scheme in EXTERNAL_SCHEMES:
                    external.add(link)
                elif url.path:
                    target = os.path.join(os.path.dirname(path), urllib.parse.unquote(url.path))
                    if not os.path.exists(target):
                        broken.append(f"{path}:{number}: {link}: no such file ({target})")
    return broken, external


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    book_dir, source_dir, markdown_files = sys.argv[1], sys.argv[2], sys.argv[3:]
    if not os.path.isfile(os.path.join(book_dir, "index.html")):
        sys.exit(f"{book_dir}: no index.html: not a built book")
    broken, external = check(book_dir, source_dir)
    for path in markdown_files:
        more_broken, more_external = check_markdown(path)
        broken += more_broken
        external = sorted(set(external) | more_external)
    for link in external:
        print(f"external (not fetched): {link}")
    for line in broken:
        print(f"BROKEN {line}")
    pages = sum(1 for _r, _d, files in os.walk(book_dir) for f in files if f.endswith(".html"))
    print(f"{book_dir}: {pages} pages, {len(broken)} broken links, {len(external)} external")
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
