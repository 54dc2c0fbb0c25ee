"""Cleaning: normalization, the C4 line rules and the Gopher document rules (``rules``), language
identification (``langid``) and sentence splitting (``sentences``); design: docs/cleaning.md.

Plain Python, no Beam: the document processes (``pipelines.localrunner.docpool``) import these modules
to clean and split batches of documents. Beam's side of the stage is ``pipelines.stages``
(``CleanDocuments``, ``SplitSentences``). Imports ``pipelines.records`` and the contract only.
"""
