"""PII planted in real prose, and prose with numbers that is not PII: the cases the PII stage is held to.

Each case is one real news article (gensim's Lee corpus, ``tests/realtext.py``) with one sentence
inserted after its second sentence; the sentence holds one value. ``PLANTED`` values are PII: the
stage must replace exactly the value (``expected``), nothing else. ``HAZARDS`` are numbers, dates,
versions, prices, identifiers and addresses that are not PII (or private addresses, which
``ip_public_only`` keeps, and the public resolvers written in single digits): the text must come out
unchanged. The sentences around the values are
ours; the articles are real. ``benchmarks/bench_pii.py`` measures recall and precision on the same
cases, beside datatrove's ``PIIFormatter``.

    from pii_corpus import cases          # in tests (pytest puts tests/ on sys.path)
    for c in cases(): c.text, c.kind, c.value, c.expected({"email": "<E>", ...})
"""

from __future__ import annotations

from dataclasses import dataclass

from realtext import after_second_sentence, news_documents

# (kind, sentence with {} where the value goes, the value)
PLANTED: list[tuple[str, str, str]] = [
    ("email", "Readers can write to {} with their questions.", "jane.citizen@example.com"),
    ("email", "Send applications to {}.", "Recruitment.Officer@Health.NSW.gov.au"),
    ("email", "The council said complaints go to {}, not to the mayor.", "complaints+roads@council.example.org"),
    ("email", "His address, {}, was published on the site.", "o'brien_p@mail.example.ie"),
    ("email", "Contact the organisers ({}) before Friday.", "info@festival-2001.example.net"),
    ("email", "Tips can be sent to <{}> in confidence.", "newsdesk@abc.example.net.au"),
    ("email", "Email {} for the full report.", "r.smith2001@uni.example.edu"),
    ("email", "A reply came from {} within the hour.", "noreply@xn--80ak6aa92e.com"),
    ("email", "Write to mailto:{} for details.", "press@example.co.uk"),
    ("email", "The memo was signed by {}.", "J.DOE@EXAMPLE.COM"),
    ("email", "Copies are available from {} on request.", "jane.citizen (at) example (dot) com"),
    ("email", "Reach the author at {} after hours.", "p.jones[at]example.org"),
    ("ip", "The attack came from the address {} on Tuesday.", "81.2.69.160"),
    ("ip", "Investigators traced the messages to {}.", "93.184.216.34"),
    ("ip", "The site ({}) was taken offline.", "151.101.1.69"),
    ("ip", "Logs show logins from {}:443 overnight.", "185.199.108.153"),
    ("ip", "The block {}/24 was assigned to the ministry.", "62.12.8.0"),
    ("ip", "One of the servers, {}, is in Sydney.", "104.16.132.229"),
    ("ip", "The hackers used the IPv6 address {} as well.", "2606:4700:4700::1111"),
    ("ip", "Mail was relayed through {} during the outage.", "2a00:1450:4009:81f::200e"),
    ("phone", "Tickets are available on {} from Monday.", "(415) 555-0132"),
    ("phone", "Callers can ring {} for advice.", "415-555-0198"),
    ("phone", "The hotline, {}, will be open all weekend.", "1-800-555-0199"),
    ("phone", "Call {} to book.", "+1 212 555 0143"),
    ("phone", "The London office is on {}.", "+44 20 7946 0958"),
    ("phone", "The Paris embassy can be reached on {}.", "+33 1 42 68 53 00"),
    ("phone", "The Sydney number is {}.", "+61 2 9374 4000"),
    ("phone", "Reservations: {}.", "415.555.0143"),
    ("phone", "Text {} to vote.", "+14155550123"),
]

# (what, sentence with {}, the value): text that must come out unchanged
HAZARDS: list[tuple[str, str, str]] = [
    ("version", "The update brings the software to version {} this week.", "10.0.19041.1"),
    ("version", "Users need release {} or later.", "2.4.1.3"),
    ("version", "The package requires typing-extensions>={}.", "3.10.0.0"),
    ("version", "Firmware {} fixed the fault.", "4.2.0.17"),
    ("version", "The installer reports build v{} on start-up.", "1.2.3.4"),
    ("version", "The Python {} release is due in October.", "3.11.7"),
    ("version", "The package was bumped to {} overnight.", "12.20.104.1"),
    ("version", "Standards-Version updated to {}.", "3.9.8.0"),
    ("resolver", "The office uses the public resolver {} for lookups.", "8.8.8.8"),
    ("section", "The rule is set out in section {} of the act.", "4.2.1.3"),
    ("dotted", "The identifier {} names the object.", "1.3.6.1.4.1"),
    ("date", "The deal was signed on {} in Canberra.", "11.09.2001"),
    ("date", "The report is dated {}.", "2001-09-11"),
    ("date", "The season ran from {}.", "1998-2001"),
    ("time", "The plane landed at {} local time.", "12:30:45"),
    ("price", "The company paid {} for the site.", "$1,234,567.89"),
    ("price", "Shares closed at {} on Friday.", "A$12.35"),
    ("price", "The contract is worth {}.", "US$2.5 billion"),
    ("number", "The population grew to {} last year.", "18 972 350"),
    ("number", "Account {} was frozen.", "123456789012"),
    ("number", "The case, number {}, was adjourned.", "2001-555-0123"),
    ("number", "Scores were {} after extra time.", "105-98"),
    ("number", "Pages {} cover the inquiry.", "123-456"),
    ("number", "The reading was {} on the scale.", "+5.2"),
    ("isbn", "The book (ISBN {}) sold out.", "978-3-16-148410-0"),
    ("isbn", "The older edition is ISBN {}.", "0-306-40615-2"),
    ("timestamp", "The log entry reads {}.", "1480615200.010"),
    ("file", "The logo file is {} on the server.", "logo@2x.png"),
    ("package", "Developers pinned {} in the project.", "react@18.2.0"),
    ("handle", "The minister posted as {} on Twitter.", "@JohnHowardPM"),
    ("private-ip", "The router at {} was reset.", "192.168.1.1"),
    ("private-ip", "Staff connect to {} inside the building.", "10.0.0.12"),
    ("private-ip", "The test page runs on {} only.", "127.0.0.1"),
    ("doc-ip", "The example uses {} as the address.", "192.0.2.44"),
    ("dotted", "The model {} was recalled.", "1.2.3.4.5"),
    ("phone-like", "The serial number {} is printed inside.", "5551234567"),
    ("phone-like", "The grant was {} in 2001.", "$415-555-0132"),
]


@dataclass(frozen=True)
class Case:
    kind: str  # a PII kind, or what a hazard is ("version", "price", ...)
    pii: bool
    value: str
    before: str
    after: str

    @property
    def text(self) -> str:
        return self.before + self.value + self.after

    def expected(self, placeholders: dict[str, str]) -> str:
        """What the stage should make of the text: the value replaced (PII of an enabled kind) or nothing."""
        if self.pii and self.kind in placeholders:
            return self.before + placeholders[self.kind] + self.after
        return self.text


def _sentences(article: str) -> tuple[str, str]:
    """The article cut after its second sentence (". " then a capital), or after its first half."""
    cut = after_second_sentence(article)
    if cut is None:
        cut = len(article) // 2 + 2
    return article[:cut], article[cut:]


def cases() -> list[Case]:
    """Every planted and hazard case, each in its own real article (in a fixed order)."""
    articles = news_documents()
    out = []
    for i, (kind, sentence, value) in enumerate(PLANTED + HAZARDS):
        head, tail = _sentences(articles[(7 * i) % len(articles)])
        pre, post = sentence.split("{}")
        out.append(Case(kind, i < len(PLANTED), value, head + pre, post + " " + tail))
    return out
