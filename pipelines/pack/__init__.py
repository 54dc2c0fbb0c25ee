"""Packing: the papers' rules (FULL-SENTENCES, DOC-SENTENCES, SEGMENT-PAIR+NSP, SENTENCE-PAIR+NSP, SOP) as
pure functions of a group of tokenized documents (design: docs/packing.md). Imports the records and
the contract only.
"""
