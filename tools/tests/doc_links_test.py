#!/usr/bin/env python3
"""Every relative link in README.md and docs/*.md (and the other Markdown files of the tree)
resolves: [text](path) and [text](path#anchor) name a file or folder that exists, relative to
the Markdown file that holds the link, and an anchor names a heading of the file it points to.
Links to other sites (http:, https:, mailto:) are not followed: the tests run offline."""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def markdown_files():
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "*.md"], capture_output=True,
                            text=True, check=True).stdout.split()
    return [ROOT / name for name in listed]


def anchors_of(path):
    """GitHub's anchors: a heading lower-cased, punctuation dropped, spaces to hyphens."""
    found, in_fence = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def links_of(path):
    in_fence = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            yield number, target


def broken_links():
    for md in markdown_files():
        for number, target in links_of(md):
            if re.match(r"^[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (md.parent / file_part).resolve() if file_part else md
            where = f"{md.relative_to(ROOT)}:{number}: ({target})"
            if not dest.exists():
                yield f"{where} names {file_part}, which does not exist"
            elif anchor and dest.suffix == ".md" and anchor.lower() not in anchors_of(dest):
                yield f"{where}: no heading '{anchor}' in {dest.relative_to(ROOT)}"


def main():
    broken = list(broken_links())
    for line in broken:
        print(line)
    count = len(markdown_files())
    print(f"{len(broken)} broken links in {count} Markdown files" if broken else
          f"every relative link in {count} Markdown files resolves")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
