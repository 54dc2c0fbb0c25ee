"""English filter without downloads: a stop-word share heuristic.

Function words make up a large, stable share of running text in every language, and the sets
barely overlap between languages. A text is English when

* the share of its word tokens that are English stop words is at least a threshold
  (``CleanConfig.min_english_score``), and
* that share is at least the share of stop words of each other language we know
  (German, French, Spanish, Dutch, Italian, Portuguese), which settles the few shared words
  ("in", "a", "was", "die", "also").

No model file, no network, ~1 µs per word. Accuracy on the labelled sample shipped in
``tests/data/langid_sample.jsonl`` is measured by ``tests/test_clean.py`` and reported in
docs/cleaning.md. It is meant for filtering crawls that are mostly English; it cannot name
languages outside the list (they simply score low on English).
"""

from __future__ import annotations

import re

ENGLISH = frozenset("""
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most my
myself no nor not now of off on once only or other our ours ourselves out over own same she should so
some such than that the their theirs them themselves then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you your
yours yourself yourselves also may might must shall upon
""".split())

OTHER: dict[str, frozenset[str]] = {
    "de": frozenset("""
aber alle allem allen aller alles als also am an auch auf aus bei bin bis bist da damit dann das dass
dem den denn der des die dies diese diesem diesen dieser dieses doch dort du durch ein eine einem einen
einer eines er es euch für hat hatte hier ich ihm ihn ihr im in ist jetzt kann kein keine mich mir mit
nach nicht noch nur ob oder sehr sein seine sich sie sind so über um und uns unter vom von vor war
waren was weil wenn wer wie wir wird wurde wurden zu zum zur zwischen
""".split()),
    "fr": frozenset("""
à au aux avec ce ces cette dans de des du elle elles en est et été être il ils je la le les leur leurs
lui mais me même mes moi mon ne nous on ou où par pas pour qu que qui sa sans se ses son sont sur ta
te tes toi ton tu un une vos votre vous y était ont avait comme aussi plus très bien
""".split()),
    "es": frozenset("""
a al algo como con de del desde donde el ella ellas ellos en entre era es esa ese eso esta este esto
está están fue ha han hay la las le les lo los más me mi muy no nos o para pero por que qué se sin
sobre su sus también te tiene un una uno y ya yo cuando porque todo
""".split()),
    "nl": frozenset("""
aan al als bij dan dat de der deze die dit doch door een en er had heb heeft hem het hij hoe hun ik in
is je kan me meer men met mij maar na naar niet nog nu of om onder ons ook op over te tegen toen tot u
uit van veel voor want was wat we werd wie wij wordt zal ze zei zich zij zijn zo zou
""".split()),
    "it": frozenset("""
a al alla alle anche che chi ci come con da dal dalla dei del della delle di e è gli ha hanno i il in
io la le lei lo loro lui ma mi ne nel nella noi non o per più quando questa questo se si sono su sua
suo tra tu un una uno era erano anche molto sempre ancora
""".split()),
    "pt": frozenset("""
a ao aos as com como da das de do dos e é ela ele eles em entre era essa esse está foi há isso já mais
mas me muito na nas não no nos o os ou para pela pelo por que se sem seu sua são também te um uma você
""".split()),
}

# word -> languages whose stop-word list holds it (one dict lookup per token for all languages)
_LANGS_OF: dict[str, tuple[str, ...]] = {}
for _lang, _words in (("en", ENGLISH), *OTHER.items()):
    for _w in _words:
        _LANGS_OF[_w] = (*_LANGS_OF.get(_w, ()), _lang)

_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")


def words_of(text: str) -> list[str]:
    """Lower-cased letter tokens (numbers and punctuation are not evidence of a language)."""
    return _WORD.findall(text.lower())


def stopword_shares(words: list[str]) -> dict[str, float]:
    """Share of tokens that are stop words, per language ('en' plus OTHER)."""
    n = len(words)
    counts = dict.fromkeys(("en", *OTHER), 0)
    get = _LANGS_OF.get
    for w in words:
        langs = get(w)
        if langs:
            for lang in langs:
                counts[lang] += 1
    return {k: (v / n if n else 0.0) for k, v in counts.items()}


def english_score(text: str) -> float:
    """Share of English stop words among the text's word tokens (0 for no words)."""
    words = words_of(text)
    return sum(1 for w in words if w in ENGLISH) / len(words) if words else 0.0


def is_english(text: str, min_score: float) -> bool:
    """English stop-word share >= min_score and >= every other language's share."""
    shares = stopword_shares(words_of(text))
    en = shares.pop("en")
    return en >= min_score and all(en >= s for s in shares.values())


def guess_language(text: str) -> str:
    """The language with the highest stop-word share ('en', 'de', ...); 'unknown' with no evidence."""
    shares = stopword_shares(words_of(text))
    best = max(shares, key=lambda k: (shares[k], k == "en"))
    return best if shares[best] > 0 else "unknown"
