"""How the ``math`` verifier reads LaTeX around a completion's answer: currency dollars, masked maths,
what math-verify is handed, and an unmarked sentence's last delimited maths.

* **Currency dollars** (``answer_values.mark_currency``, re-exported here): GSM8K-style working
  writes amounts with ``$`` ("She earns $12 * 5 = $60.\n\n#### $60"), which a maths reader would
  pair as delimiters and so hide the text between them.  A ``$`` before a number is a currency
  sign, escaped to ``\\$``, when the span it would open is no inline maths: it holds a blank line
  (TeX forbids one in inline maths), it ends in a space before its closing ``$`` (``$12 * 5 = $``),
  or that closing ``$`` opens another amount (``$60``).  ``$5$``, ``$1,250$`` and ``$2^5 = 32$`` stay
  maths.
* **Masked maths** (``mask_maths``): the content of every box and delimited span that is pure maths is
  replaced by a placeholder, so that the reader's prose rules do not read the numbers inside one
  tuple as several answers.
* ``maths_form``: what math-verify reads for one stated answer; ``delimited_maths``: the last delimited
  maths of an unmarked last line.

What this module does not decide: which statement is the answer (``answers.py``), or whether it equals
the reference (``mathequiv``).
"""

from __future__ import annotations

import re

from veriloop.verifiers.answer_values import mark_currency  # noqa: F401  (re-exported)
from veriloop.verifiers.answers import clean_value, normalize_text
from veriloop.verifiers.mathequiv import plain_number


def last_block(text: str) -> str:
    """The last line, or the whole display-maths block (``\\[ ... \\]``, ``$$ ... $$``) that it closes."""
    lines = [ln for ln in text.strip().split("\n") if ln.strip()]
    if not lines:
        return ""
    last = lines[-1].strip().rstrip(".,;").rstrip()
    if last.endswith("\\]") and "\\[" not in last and "\\[" in text:
        return text[text.rfind("\\[") :].strip()
    if last.endswith("$$") and last.count("$$") == 1:
        end = text.rstrip().rfind("$$")
        if text.rfind("$$", 0, end) >= 0:
            return text[text.rfind("$$", 0, end) :].strip()
    return lines[-1].strip()


# $$...$$, \[...\], \(...\), $...$ (an escaped \$ is a dollar sign, not a delimiter)
_DELIMITED_MATHS = re.compile(r"\$\$.+?\$\$|\\\[.+?\\\]|\\\(.+?\\\)|(?<!\\)\$(?:\\\$|[^$])+?(?<!\\)\$", re.DOTALL)
# a relation that clean_value (made for numbers) cuts to its right side: "x >= 5" is not 5, "x + y = 1" not 1
_CUT_RELATION = re.compile(r"[<>!]=|==|[<>≤≥≠]|(?<![A-Za-z])[A-Za-z](?![A-Za-z])[^=]*=")  # a variable, not a word


_PLACEHOLDER = re.compile(r"\\vlmath([a-z]{3})")
_NUMBER_LIKE = re.compile(r"^\s*[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)\s*(?:\\?%)?\s*$")
# What a rejected verdict on an unmarked sentence's last delimited maths says it read (mathverify_suite
# classifies by it).
LAST_MATHS = "(last-maths) read from the last delimited maths of an unmarked sentence"
_HEDGE_MARK = re.compile(r"\\approx|\\sim\b|\\simeq|[~\u2248\u2243\u223c?]")


def _pure_maths(content: str) -> bool:
    """Maths with no words in it (single-letter variables, commands and environments allowed), not
    a plain number (numbers stay visible to the prose rules) and no approximation sign."""
    if re.fullmatch(r"\s*[A-Za-z]\s*", content):  # a variable ($x$) names no value: the prose rules may read it
        return False
    bare = re.sub(r"\\(?:begin|end)\{[^{}]*\}|\\[A-Za-z]+", " ", content)
    return (
        bool(content.strip())
        and not _NUMBER_LIKE.match(content)
        and not _HEDGE_MARK.search(content)
        and not re.search(r"[A-Za-z]{2,}", bare)
        and not _PLACEHOLDER.search(content)
    )


def _closing_brace(text: str, start: int) -> int:
    """Index of the brace that closes the one opened just before ``start``, or -1."""
    depth = 1
    for j in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return j
    return -1


def mask_maths(text: str) -> tuple[str, dict[str, str]]:
    """``text`` with the content of every box and delimited maths span that is pure maths replaced by
    a placeholder command (``\\vlmathaaa``; equal content, equal placeholder), and the map back.

    The answer reader's prose rules look at numbers and words; inside maths those misread: the
    numbers of one tuple ``(\\frac{1}{5}, \\frac{1}{6})`` are not several answers, ``14{,}916`` is one
    number, ``pmatrix`` is not a word.  Punctuation that ends the span stays visible (``$x.$``: a
    sentence ends there).  With maths masked its rules (negation, hedges, conditions,
    revisions, several values) still read all the prose and every plain number around it.
    """
    names: dict[str, str] = {}
    out: dict[str, str] = {}

    def hide(content: str) -> str:
        if not _pure_maths(content):
            return content
        core, stop = re.match(r"(.*?)([\s.,;:!?]*)$", content, re.DOTALL).groups()  # "$14.$": the period stays
        key = re.sub(r"\s+", "", core)
        if key not in names:
            k = len(names)
            names[key] = "\\vlmath" + "".join(chr(97 + (k // 26**i) % 26) for i in (2, 1, 0))
            out[names[key]] = core.strip()
        return names[key] + stop

    parts, i = [], 0
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        if m.start() < i:
            continue
        end = _closing_brace(text, m.end())
        if end < 0:
            break
        parts += [text[i : m.end()], hide(text[m.end() : end]), "}"]
        i = end + 1
    text = "".join(parts) + text[i:]

    def delimited(m: re.Match) -> str:
        whole = m.group(0)
        opener = next(o for o in ("$$", "\\[", "\\(", "$") if whole.startswith(o))
        closer = {"$$": "$$", "\\[": "\\]", "\\(": "\\)", "$": "$"}[opener]
        inner = whole[len(opener) : len(whole) - len(closer)]
        return whole if "\\boxed" in inner or "\\fbox" in inner else opener + hide(inner) + closer

    return _DELIMITED_MATHS.sub(delimited, text), out


def unmask(text: str, names: dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: names.get(m.group(0), m.group(0)), text)


def maths_form(span: str) -> str:
    """What math-verify reads for one stated answer: its cleaned value when that is a plain number
    (``18 apples`` -> ``18``, ``15 * 8 = 120`` -> ``120``), else the statement as written (delimiters
    and relations kept: ``$[0,1)$``, ``\\boxed{1,2}``, ``x + y = 1``)."""
    value = clean_value(span)
    if plain_number(value) is not None and not _CUT_RELATION.search(span.replace("\\", "")):
        return value
    return span.strip()


def delimited_maths(text: str, numbers: bool = False) -> str | None:
    """An unmarked last line that is a sentence: its last delimited maths (``$...$``, ``\\(...\\)``,
    ``\\[...\\]``, ``$$...$$``), or the display block that ends the text.  None for a question, and
    for a plain number unless ``numbers``: a number in a sentence is prose (it may be quoted from the
    question), but a display block on lines of its own is like a last line that is the number."""
    block = last_block(normalize_text(text))
    found = [m.group(0) for m in _DELIMITED_MATHS.finditer(block)]
    if not found or block.rstrip().endswith("?"):
        return None
    inner = found[-1].strip("$").removeprefix("\\[").removeprefix("\\(").removesuffix("\\]").removesuffix("\\)")
    return None if _NUMBER_LIKE.match(inner) and not numbers else found[-1]
