"""Packing: the papers' rules (FULL-SENTENCES, DOC-SENTENCES, SEGMENT-PAIR+NSP, SENTENCE-PAIR+NSP, SOP)
and the Beam step of the build graph that applies them (design: docs/packing.md).

- ``sequences``: what packing makes and counts (``PackedSequence``, ``PackStats``) and the keyed
  helpers the rules share;
- ``rules``: routing (``split_of``, ``group_of``), the entry point ``pack_group`` and
  FULL- / DOC-SENTENCES;
- ``pairs``: the pair rules (SEGMENT-PAIR+NSP, SOP, SENTENCE-PAIR+NSP);
- ``encoding``: a packed group between stages (``encode_packed`` / ``decode_packed``);
- ``step``: the packing step (``TokenGroups``, ``GroupForPacking``, ``pack_groups``, ``shard_offsets``).

All but ``step`` are pure functions of a group of tokenized documents: they import the records and
the contract only, never Beam. ``step`` imports Beam, those modules, ``pipelines.coders`` and the
intermediates' part files (``pipelines.intermediates``; ``pipelines.corpus.commit`` would do too), never
``pipelines.corpus.shards``: the shard writer imports ``step`` to run it, and no import goes back.
"""
