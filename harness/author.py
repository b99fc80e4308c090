"""Who the exported series is from: the identity that `./xpfo export --author`
(or kernel/PARTS' ``author:`` line) puts in place of the placeholder.

The commits of build/src are made as the placeholder identity (PLACEHOLDER,
build/src's own git config). `rewrite()` turns the text of an exported patch,
or of a cover letter, into the one git format-patch would have written had
those commits been made and signed off as the author: the ``From:`` header
of the mail, if it is the placeholder's, each ``Signed-off-by:`` line of
the placeholder in the trailer block of the commit message, and a cover
letter's shortlog line of the placeholder ("xpfo-dev (24):"). Nothing else
changes: another person's ``From:`` or sign-off, the other trailers, a
sign-off quoted in the changelog's prose or in the diff.
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from .errors import HarnessError


@dataclass(frozen=True)
class Identity:
    name: str
    email: str

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


PLACEHOLDER = Identity("xpfo-dev", "xpfo-dev@localhost")

FORMAT = '"Name <user@example.org>"'
_IDENT = re.compile(r"^(?P<name>[^<>]*?)\s*<(?P<email>[^<>]*)>$")
_EMAIL = re.compile(r"^[^\s<>@]+@[^\s<>@]+$")
# what git drops from either end of a name (ident.c: crud()), quotes included
_CRUD = " ,:;\"\\'"
MAX_NAME = 60


def parse(text: str, where: str = "--author") -> Identity:
    """`text` as an identity, "Name <user@host>", or a HarnessError that says
    what is wrong with it. `where` names the option or the file line."""
    def bad(why: str) -> HarnessError:
        return HarnessError(f"{where} {text!r}: {why}",
                            f"give the identity as {FORMAT}, as in a Signed-off-by: line")
    if "\n" in text or "\r" in text:
        raise bad("a line break in it: an identity is one line")
    if any(ord(c) < 0x20 or ord(c) == 0x7f for c in text):
        raise bad("a control character in it")
    m = _IDENT.match(text.strip())
    if not m:
        if "<" not in text or ">" not in text:
            raise bad("no address in <...>")
        raise bad("expected a name, then one address in <...> at the end")
    name, email = m["name"].strip().strip(_CRUD), m["email"].strip()
    if not name:
        raise bad("no name before the address")
    # git am (mailinfo.c: get_sane_name()) takes the address for the name
    # of a From: whose name has an '@' or is over 60 bytes
    if "@" in name:
        raise bad("an '@' in the name, which git am would replace with the address")
    if len(name.encode()) > MAX_NAME:
        raise bad(f"a name over {MAX_NAME} bytes, which git am would replace with the address")
    if not _EMAIL.match(email):
        raise bad(f"<{email}> is no address of the form user@host")
    return Identity(name, email)


# ---------------------------------------------------------------------------
# the From: header, as git format-patch writes it (pretty.c: pp_user_info)

_RFC822_SPECIALS = set('()<>[]:;@,."\\')
_RFC2047_PLAIN = set("!*+-/")
ENCODING = "UTF-8"


def _rfc2047(name: str, used: int) -> str:
    """`name` as RFC 2047 encoded words ("Q", every space as =20), broken
    where a line would pass 76 columns; `used`: columns before it."""
    out = f"=?{ENCODING}?q?"
    col = used + len(ENCODING) + 5
    for ch in name:
        raw = ch.encode("utf-8", "surrogateescape")
        special = len(raw) > 1 or not (ch.isascii() and (ch.isalnum() or ch in _RFC2047_PLAIN))
        enc = "".join(f"={b:02X}" for b in raw) if special else ch
        if col + len(enc) + 2 > 76:
            out += f"?=\n =?{ENCODING}?q?"
            col = len(ENCODING) + 5 + 1
        out += enc
        col += len(enc)
    return out + "?="


def _wrapped(text: str, used: int, width: int) -> str:
    """git's strbuf_add_wrapped_text() with indent -used, then 1, for a
    line of printable ASCII: words moved to a continuation line (one space
    of indent) where the line would pass `width` columns."""
    out: List[str] = []
    line, w = "", used
    for i, word in enumerate(text.split(" ")):
        if i == 0 and used + len(word) > width:
            out.append("")                  # git breaks before a first word too long
            line, w = f" {word}", 1 + len(word)
        elif i == 0:
            line, w = word, used + len(word)
        elif w + 1 + len(word) <= width:
            line, w = f"{line} {word}", w + 1 + len(word)
        else:
            out.append(line)
            line, w = f" {word}", 1 + len(word)
    out.append(line)
    return "\n".join(out)


def from_header(ident: Identity) -> str:
    """The From: header of a mail from `ident`, folded as git folds it,
    with its newline."""
    head = "From: "
    name = ident.name
    if not name.isascii() or "=?" in name or "\x1b" in name:
        text, width = _rfc2047(name, len(head)), 76
    else:
        if any(c in _RFC822_SPECIALS for c in name):
            name = '"' + re.sub(r'(["\\])', r"\\\1", name) + '"'
        text, width = _wrapped(name, len(head), 78), 78
    last = len((head + text).rsplit("\n", 1)[-1])
    sep = "\n" if width < last + len(" <") + len(ident.email) + len(">") else ""
    return f"{head}{text}{sep} <{ident.email}>\n"


# ---------------------------------------------------------------------------
# the rewrite of one patch or cover letter

MIME = ("MIME-Version: 1.0\n", f"Content-Type: text/plain; charset={ENCODING}\n",
        "Content-Transfer-Encoding: 8bit\n")


def _ends_message(line: str) -> bool:
    """Where `git am` stops reading the commit message (mailinfo.c's
    patchbreak()): a "---" line, a diff's first line; or the signature
    ("-- ") that ends a cover letter without a diffstat."""
    body = line.rstrip("\r\n")
    if body.startswith(("diff -", "Index: ")) or body == "-- ":
        return True
    if body.startswith("---") and len(body) >= 3:
        rest = body[3:]
        return rest.strip() == "" or (rest.startswith(" ") and not rest[1:2].isspace())
    return False


def _header_fields(lines: List[str], end: int) -> List[List[int]]:
    """The mail headers in lines[1:end] (lines[0] is the mbox "From "
    line), each as the indexes of its line and its continuation lines."""
    fields: List[List[int]] = []
    for i in range(1, end):
        if lines[i][:1] in (" ", "\t") and fields:
            fields[-1].append(i)
        else:
            fields.append([i])
    return fields


def rewrite(text: str, author: Identity, placeholder: Identity = PLACEHOLDER) -> str:
    """`text` (a format-patch mail) as if `author` had written and signed
    off what `placeholder` did: see the module's docstring."""
    if author == placeholder:
        return text
    lines = text.splitlines(keepends=True)
    if not lines or not lines[0].startswith("From "):
        return text                         # not a format-patch mail
    end = next((i for i, line in enumerate(lines) if line.strip("\r\n") == ""), len(lines))
    fields = _header_fields(lines, end)
    new_head: List[str] = []
    old_from = from_header(placeholder)
    has_mime = any(lines[f[0]].lower().startswith("content-type:") for f in fields)
    subject_at = None
    for f in fields:
        field = "".join(lines[i] for i in f)
        if field.replace("\r\n", "\n") == old_from:
            eol = "\r\n" if lines[f[0]].endswith("\r\n") else "\n"
            field = from_header(author).replace("\n", eol)
        new_head.append(field)
        if lines[f[0]].lower().startswith("subject:"):
            subject_at = len(new_head)
    # the commit message: from the blank line after the headers to where
    # git am stops; its trailer block is its last paragraph
    stop = next((i for i in range(end + 1, len(lines)) if _ends_message(lines[i])), len(lines))
    last = stop
    while last > end + 1 and lines[last - 1].strip() == "":
        last -= 1
    first = last
    while first > end + 1 and lines[first - 1].strip() != "":
        first -= 1
    old_sob = f"Signed-off-by: {placeholder}"
    changed = False
    body = lines[end:]
    for i in range(first, last):
        if lines[i].rstrip("\r\n") == old_sob:
            body[i - end] = f"Signed-off-by: {author}" + lines[i][len(old_sob):]
            changed = True
    # a cover letter's shortlog: "Name (N):", then the subjects indented
    shortlog = re.compile(re.escape(placeholder.name) + r" (\(\d+\):\r?\n)")
    for i in range(end + 1, stop - 1):
        m = shortlog.fullmatch(lines[i])
        if m and lines[i + 1].startswith("  "):
            body[i - end] = f"{author.name} {m[1]}"
            changed = True
    if changed and not author.name.isascii() and not has_mime and subject_at is not None:
        new_head[subject_at:subject_at] = list(MIME)
    return lines[0] + "".join(new_head) + "".join(body)


def rewrite_file(path: Path, author: Optional[Identity]) -> None:
    """Rewrite the patch or cover letter at `path` in place; no author, or
    the placeholder, leaves the file as it is, byte for byte."""
    if author is None or author == PLACEHOLDER:
        return
    data = path.read_bytes().decode("utf-8", "surrogateescape")
    new = rewrite(data, author)
    if new != data:
        path.write_bytes(new.encode("utf-8", "surrogateescape"))

