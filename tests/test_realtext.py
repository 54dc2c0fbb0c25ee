"""The real prose that tests and benchmarks draw on (tests/realtext.py): the AWS API reference part."""

from __future__ import annotations

import re

from realtext import AWS_DOC_CHARS, aws_documents, aws_paragraphs


def test_aws_paragraphs_drop_markup_and_keep_whole_sentences() -> None:
    doc = ("<p>Creates a <code>Bucket</code> . Short caption.</p><note><p>To create a bucket you must "
           "set up the service and have a valid access key to authenticate requests; anonymous requests "
           "are never allowed &amp; never will be.</p></note><ul><li>A list item that is long enough to "
           "count as prose but does not end with a sentence mark at all in this</li></ul>")
    assert aws_paragraphs(doc) == [
        "To create a bucket you must set up the service and have a valid access key to authenticate "
        "requests; anonymous requests are never allowed & never will be."]


def test_aws_documents_are_megabytes_of_clean_distinct_prose() -> None:
    docs = aws_documents()
    assert sum(map(len, docs)) > 2_500_000  # the ~3 MB the cpu benchmark counts on
    paragraphs = [p for d in docs for p in d.split("\n")]
    # Boilerplate shared across services is dropped: only repeats inside one operation's text stay.
    assert len(set(paragraphs)) > 0.999 * len(paragraphs)
    assert all(len(p.split()) >= 20 and p[-1] in ".!?" for p in paragraphs)
    # The reference's own markup is gone (placeholders like "<alias>" are its text, escaped in the HTML).
    assert not any(re.search(r"</?(p|code|a|i|b|note|ul|li|important|div|para)\b[^<>]*>", p) for p in paragraphs)
    # Most documents are page-sized (a run of operations), not one-line captions (a service's last
    # run may be shorter).
    assert sum(len(d) >= AWS_DOC_CHARS for d in docs) > 0.7 * len(docs)
    # Deterministic: a smaller per-service budget yields the same documents, fewer of them, in order.
    small = aws_documents(per_service_chars=2000)
    assert 0 < len(small) < len(docs) and small[0] == docs[0]
