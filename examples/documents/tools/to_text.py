"""Documents to plain text: .txt as is, .md without its markup, .html/.htm without tags,
scripts or styles, and .pdf through pdftotext when the host has it. Standard library only.

Usage: to_text.py INBOX OUTDIR. Each INBOX/NAME.EXT becomes OUTDIR/NAME.EXT.txt; other
files, links and anything unreadable are skipped with a line on stderr."""

import html.parser
import os
import re
import shutil
import subprocess
import sys

MAX_INPUT = 20 * 1024 * 1024


class _Text(html.parser.HTMLParser):
    SKIP = {"script", "style", "head", "template", "noscript"}
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "title", "pre"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.skipping = [], 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCK:
            self.out.append("\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.BLOCK:
            self.out.append("\n")

    def handle_data(self, data):
        if not self.skipping:
            self.out.append(data)


def from_html(raw):
    p = _Text()
    p.feed(raw)
    p.close()
    lines = (" ".join(line.split()) for line in "".join(p.out).splitlines())
    return "\n".join(line for line in lines if line) + "\n"


def from_markdown(raw):
    text = re.sub(r"```[^\n]*\n", "", raw)
    text = re.sub(r"!?\[([^\]]*)\]\(([^)]*)\)", r"\1 (\2)", text)
    text = re.sub(r"^\s{0,3}(#{1,6}|>|[-*+])\s+", "", text, flags=re.M)
    return re.sub(r"(\*\*|__|\*|`)", "", text)


def from_pdf(path):
    done = subprocess.run(["pdftotext", "-q", "-enc", "UTF-8", path, "-"], capture_output=True, timeout=60)
    if done.returncode != 0:
        raise ValueError("pdftotext failed")
    return done.stdout.decode("utf-8", "replace")


def convert(path, ext):
    if ext == ".pdf":
        return from_pdf(path)
    with open(path, "rb") as f:
        raw = f.read(MAX_INPUT + 1)
    if len(raw) > MAX_INPUT:
        raise ValueError("too large")
    text = raw.decode("utf-8", "replace")
    if ext in (".html", ".htm"):
        return from_html(text)
    if ext == ".md":
        return from_markdown(text)
    return text


def main(inbox, outdir):
    kinds = {".txt", ".md", ".html", ".htm"} | ({".pdf"} if shutil.which("pdftotext") else set())
    failed = 0
    for name in sorted(os.listdir(inbox)):
        path = os.path.join(inbox, name)
        ext = os.path.splitext(name)[1].lower()
        if os.path.islink(path) or not os.path.isfile(path) or ext not in kinds:
            print(f"skipped {name!r}: not a regular {'/'.join(sorted(kinds))} file", file=sys.stderr)
            continue
        try:
            text = convert(path, ext)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            print(f"failed {name!r}: {e}", file=sys.stderr)
            failed += 1
            continue
        with open(os.path.join(outdir, name + ".txt"), "w", encoding="utf-8") as f:
            f.write(text)
        print(f"converted {name!r}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
