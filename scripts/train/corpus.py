"""Training text from Debian packages: the King James Bible (bible-kjv,
public domain) and the licence texts in /usr/share/common-licenses.

The Bible is printed verse by verse by the `bible` program; verses of one
chapter are joined into one paragraph under a "Book N" heading. The last
HELDOUT_BYTES of the Bible (from Revelation backwards) are held out for
evaluation and never trained on.
"""
import os
import re
import subprocess

HELDOUT_BYTES = 200_000
_REF = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")


def bible_text():
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True,
                         capture_output=True, text=True).stdout
    paragraphs, current, key = [], [], None
    for line in out.splitlines():
        m = _REF.match(line.strip())
        if not m:
            if current and line.strip():
                current[-1] += " " + line.strip()
            continue
        book, chapter, _, verse = m.groups()
        if (book, chapter) != key:
            if current:
                paragraphs.append(" ".join(current))
            key = (book, chapter)
            current = [f"{book} {chapter}\n"]
        current.append(verse.strip())
    if current:
        paragraphs.append(" ".join(current))
    return "\n\n".join(p.replace("\n ", "\n") for p in paragraphs) + "\n"


def licence_texts(folder="/usr/share/common-licenses"):
    texts = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
    return "\n\n".join(texts)


def load():
    """Returns (train_text, heldout_text)."""
    bible = bible_text()
    heldout = bible[-HELDOUT_BYTES:]
    cut = heldout.find("\n\n")  # start at a chapter boundary
    heldout = heldout[cut + 2:]
    train = bible[:len(bible) - len(heldout)] + "\n\n" + licence_texts()
    return train, heldout
