"""The build's config from ``--config`` and the command-line flags: the sources the per-source flags set,
each flag's key, and one line naming the flag of a value the config refuses."""

from __future__ import annotations

import sys
from typing import Any

from pipelines.clean.pii import KINDS as PII_KINDS
from pipelines.flags import split_input, tagged
from pipelines.options import BuildOptions
from schemas.config import BuildConfig, SourceConfig
from schemas.configfile import parse_config
from schemas.errors import UserError
from shardforge.console.words import counted
from shardforge.storage import redact_url
from shardforge.storage.contract import load_config_data


def source_config(data: dict[str, Any], given: str) -> SourceConfig:
    """A SourceConfig from what a flag gave (``--input NAME=URL``, ``serve --source NAME``), or one line."""
    try:
        return parse_config(SourceConfig, data, what=given)
    except UserError as e:
        if f"invalid {given}: name: " in str(e):
            raise UserError(f"{given}: the source name {data.get('name')!r} is not 1 to 40 lowercase letters, "
                            "digits or _ (it names the source in reports and manifests)") from None
        raise


def source_flags(o: Any) -> dict[str, Any]:
    """The source keys the per-source flags set (``add_source_flags``: --format, --text_field, --encoding,
    --delimiter, --follow_links), for every source of a build or a served corpus's batches."""
    out: dict[str, Any] = {key: value for key, value in (
        ("format", o.format), ("text_field", o.text_field), ("encoding", o.encoding),
        ("follow_links", o.follow_links or None)) if value is not None and value != ""}
    if o.delimiter is not None:  # '' is a delimiter: blank lines
        out["delimiter"] = o.delimiter
    return out


# Stands in for the sources of a config printed without any (``build --print-config`` alone, which
# prints every other setting; ``build_config_yaml(..., sources=False)`` leaves it out).
NO_SOURCE = {"name": "other", "input": "raw/*.jsonl"}


def build_config_from_options(opts: BuildOptions, need_sources: bool = True) -> BuildConfig:
    """Merge --config (if any) with the command-line flags into a validated BuildConfig; without
    need_sources, a config given no source holds ``NO_SOURCE``."""
    o = opts.view_as(BuildOptions)
    # The file may set only some sections (``tokenizer: {model_type: byte_bpe}``): the flags add the rest.
    data: dict[str, Any] = load_config_data(BuildConfig, o.config) if o.config else {}
    if o.input and data.get("sources"):
        names = ", ".join(str(s.get("name", "?")) if isinstance(s, dict) else "?" for s in data["sources"])
        print(f"note: --input replaces the {counted(len(data['sources']), 'source')} of --config {redact_url(o.config)} ({names}); to "
              "build those too, give each as an --input NAME=URL, or leave --input out", file=sys.stderr)
    per_source = source_flags(o)
    if o.input:
        sources = []
        for i, arg in enumerate(o.input):
            name, url = split_input(arg)
            if name == "other" and len(o.input) > 1 and not tagged(arg):  # a tag given is kept as given
                name = f"other{i}"
            src: dict[str, Any] = {"name": name, "input": url, **per_source}
            sources.append(source_config(src, f"--input {arg!r}").model_dump())
        data["sources"] = sources
    if not data.get("sources"):
        if need_sources:
            raise UserError("no input: give --input URL (or a --config with sources)")
        data["sources"] = [NO_SOURCE]
    if per_source:  # the flags set every source: the --input ones above, or the --config's
        data["sources"] = [{**s, **per_source} if isinstance(s, dict) else s for s in data["sources"]]

    given: dict[str, str] = {}  # config key -> the flag that set it, for an error about its value
    for i in range(len(data["sources"])):
        given.update({f"sources.{i}.{key}": f"--{key}" for key in per_source})

    def put(section: str, key: str, flag: str, value: Any = None) -> None:
        value = getattr(o, flag) if value is None else value
        if value is not None:
            data.setdefault(section, {})[key] = value
            given[f"{section}.{key}"] = f"--{flag}"

    put("packing", "rule", "rule")
    put("packing", "max_seq_len", "max_seq_len")
    put("packing", "valid_fraction", "valid_fraction")
    put("tokenizer", "vocab_size", "vocab_size")
    put("tokenizer", "model_type", "tokenizer_kind")
    if o.languages is not None:  # "any": every language kept (the language is still recorded)
        codes = [c.strip() for c in o.languages.split(",") if c.strip()]
        put("clean", "languages", "languages", [] if codes == ["any"] else codes)
    put("tokenizer", "model_url", "tokenizer")
    put("shards", "target_bytes", "shard_bytes")
    put("shards", "target_samples", "shard_samples")
    put("clean", "min_words", "min_words")
    put("clean", "max_words", "max_words")
    if o.max_doc_bytes is not None:
        put("clean", "max_doc_bytes", "max_doc_bytes")
        data["sources"] = [with_record_room(s, o.max_doc_bytes) for s in data["sources"]]
    put("dedupe", "index", "dedupe_index")
    if o.pii is not None:
        data.setdefault("clean", {})["pii"] = {**data.get("clean", {}).get("pii", {}), **pii_kinds(o.pii)}
    put("decontaminate", "paths", "decontaminate")
    put("decontaminate", "ngram", "decontaminate_ngram")
    put("decontaminate", "mode", "decontaminate_mode")
    if o.no_near_dedupe:
        put("dedupe", "near", "no_near_dedupe", False)
    if o.seed is not None:
        data["seed"] = o.seed
        given["seed"] = "--seed"
    return parse_config(BuildConfig, data, what="build config", flags=given)


def with_record_room(source: Any, max_doc_bytes: int) -> Any:
    """A source (as config data) whose records may be read up to 4x ``max_doc_bytes`` (JSON escapes, as
    the defaults' 4 MB for 1 MB), so a document the cleaning stage keeps is not cut short by its reader."""
    if not isinstance(source, dict):
        return source
    default = SourceConfig.model_fields["max_record_bytes"].default
    room = max(4 * max_doc_bytes, int(source.get("max_record_bytes") or default))
    return {**source, "max_record_bytes": room}


def pii_kinds(arg: str) -> dict[str, bool]:
    """``--pii email,ip`` -> each kind on or off (``none``: every kind off); one line for an unknown kind."""
    given = {k.strip() for k in arg.split(",") if k.strip()}
    if given == {"none"}:
        given = set()
    unknown = sorted(given - set(PII_KINDS))
    if unknown:
        raise UserError(f"--pii {arg!r}: unknown kind(s) {unknown}; give a comma list of {', '.join(PII_KINDS)}, or none")
    return {k: k in given for k in PII_KINDS}
