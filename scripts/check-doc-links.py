#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Check the relative links of Markdown files: every [text](target) that is
not a URL must name an existing file, and its #anchor (or a bare #anchor)
a heading of that file, as GitHub slugs headings.  Also checks that an
image link names an existing file.

    scripts/check-doc-links.py [FILE.md ...]    (default: README.md docs/*.md)

Prints one line per broken link and exits 1 if there is any."""

import glob
import os
import re
import sys

LINK = re.compile(r'!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
FENCE = re.compile(r'^\s*(```|~~~)')


def slug(heading):
    """GitHub's anchor for a heading: lower case, markup and punctuation
    dropped (hyphens and underscores kept), spaces to hyphens."""
    h = re.sub(r'`([^`]*)`', r'\1', heading.strip())
    h = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', h)
    h = h.lower()
    h = re.sub(r'[^\w\- ]', '', h)
    return h.replace(' ', '-')


def prose(path):
    """The file's lines outside fenced code blocks."""
    out, fenced = [], False
    with open(path, encoding='utf-8') as f:
        for line in f:
            if FENCE.match(line):
                fenced = not fenced
                continue
            if not fenced:
                out.append(line)
    return out


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        for line in prose(path):
            m = re.match(r'^(#{1,6})\s+(.*?)\s*#*\s*$', line)
            if not m:
                continue
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else '%s-%d' % (s, n))
        cache[path] = found
    return cache[path]


def check(path):
    bad = []
    base = os.path.dirname(path)
    for n, line in enumerate(prose(path), 1):
        # inline code is not a link
        line = re.sub(r'`[^`]*`', '', line)
        for target in LINK.findall(line):
            if re.match(r'^[a-z][a-z0-9+.-]*:', target):   # http:, mailto:
                continue
            file, _, anchor = target.partition('#')
            dest = os.path.normpath(os.path.join(base, file)) if file else path
            if not os.path.exists(dest):
                bad.append('%s: %s: no such file' % (path, target))
                continue
            if anchor and dest.endswith('.md') and anchor not in anchors(dest):
                bad.append('%s: %s: no such heading' % (path, target))
    return bad


def main(argv):
    files = argv or ['README.md'] + sorted(glob.glob('docs/*.md'))
    bad = [b for f in files for b in check(f)]
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
