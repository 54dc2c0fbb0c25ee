"""Cleaning: what the clean stage does to a document, one module a concern (design: docs/cleaning.md).

- ``normalize``: text normalization, and the bytes the reader could not decode (invalid UTF-8);
- ``lines``: the C4 line rules (boilerplate lines) and the sources they apply to;
- ``stats``: the document statistics the rules read (words, letters, ``NGrams``, duplicate
  fractions, ``DocStats``);
- ``rules``: the named page and document rules (C4, Gopher), ``clean_document``, ``clean_batch``,
  ``raw_words`` and the registry of rule names (``RULE_NAMES``, ``disabled_rules``);
- ``pii``: e-mail / IP / phone numbers in kept documents replaced by placeholders;
- ``langid``: language identification; ``sentences``: sentence splitting.

Plain Python, no Beam: the document processes (``pipelines.localrunner.docpool``) import these modules
to clean and split batches of documents. Beam's side of the stage is ``pipelines.stages``
(``CleanDocuments``, ``SplitSentences``). Imports ``pipelines.records`` and the contract only.
"""
