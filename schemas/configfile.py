"""Configs read and checked: a config file's bytes (YAML or JSON) or a mapping as one of the models of
``schemas.config``, every validation failure as one line in the user's words (an unknown key with the
closest known one, as a mistyped flag is answered).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from schemas.config import BuildConfig, TrainConfig
from schemas.errors import UserError

M = TypeVar("M", bound=BaseModel)


def _model_at(cls: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class whose keys live at ``loc`` (a validation error's path) under cls, or None."""
    import typing

    model: Any = cls
    for part in loc:
        if isinstance(part, int) or model is None:  # a list item: the list's element type came before
            continue
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return None
        found = None
        for arg in (field.annotation, *typing.get_args(field.annotation)):
            for t in (arg, *typing.get_args(arg)):  # list[SourceConfig], SourceConfig | None, ...
                if isinstance(t, type) and issubclass(t, BaseModel):
                    found = t
        model = found
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def key_named(written: str, other_names: dict[str, str] | None, has: Callable[[str], bool]) -> str | None:
    """The key an unknown dotted key names under another name (``other_names``: ``learning_rate`` ->
    ``optim.lr``, looked up whole, then by its last part), in the section it was written in where that
    section has it (``has``: ``eval_masking.mlm_probability`` -> ``eval_masking.rate``); None for none."""
    names = other_names or {}
    named = names.get(written) or names.get(written.rsplit(".", 1)[-1])
    if named and "." in written:
        here = f"{written.rsplit('.', 1)[0]}.{named.rsplit('.', 1)[-1]}"
        if has(here):
            return here
    return named


def _error_text(cls: type[BaseModel] | None, err: Any, flags: dict[str, str] | None = None,
                other_names: dict[str, str] | None = None) -> str:
    """One validation error in the user's words: an unknown key with the closest known one, or the key it
    names under another name (``other_names``: ``key_named``); a key a flag set named by the flag first (``flags``:
    dotted key -> the flag given, ``--lr (optim.lr)``)."""
    loc = ".".join(str(x) for x in err["loc"]) or "(root)"
    if flags and loc in flags:  # "--lr (optim.lr)"; "--device" for the key device
        loc = flags[loc] if flags[loc].lstrip("-") == loc else f"{flags[loc]} ({loc})"
    if err["type"] == "extra_forbidden" and cls is not None:
        import difflib

        model = _model_at(cls, tuple(err["loc"][:-1]))
        known = sorted(model.model_fields) if model is not None else []
        key = str(err["loc"][-1])
        where = ".".join(str(x) for x in err["loc"][:-1])
        named = key_named(loc, other_names, lambda k: k.rsplit(".", 1)[-1] in known)
        if named:
            return f"{loc}: unknown key (the key for that is {named})"
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else f"known keys{f' of {where}' if where else ''}: " \
                                                          f"{', '.join(known)}"
        return f"{loc}: unknown key ({hint})" if known else f"{loc}: unknown key"
    if err["type"] == "missing":
        return f"{loc}: required, and not given"
    if err["type"] == "value_error":  # a validator's own words, without pydantic's "Value error, "
        said = err.get("ctx", {}).get("error", err["msg"])
        return f"{loc}: {said}" if err["loc"] else str(said)  # a rule over several keys says which itself
    return f"{loc}: {err['msg']}"


def format_validation_error(e: ValidationError, cls: type[BaseModel] | None = None,
                            flags: dict[str, str] | None = None, other_names: dict[str, str] | None = None) -> str:
    """A pydantic error as one line: each wrong field with what is wrong (cls: the model validated, so
    that an unknown key is answered with the closest known one, as a mistyped flag is; flags: the
    keys the command's flags set, named by those flags; other_names: a key's other names, ``_error_text``)."""
    return "; ".join(_error_text(cls, err, flags, other_names) for err in e.errors())


def parse_config(cls: type[M], data: dict[str, Any], what: str = "config", flags: dict[str, str] | None = None,
                 other_names: dict[str, str] | None = None) -> M:
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise UserError(f"invalid {what}: {format_validation_error(e, cls, flags, other_names)}") from None


def check_partial_config(cls: type[BaseModel], data: dict[str, Any], what: str = "config",
                         other_names: dict[str, str] | None = None) -> dict[str, Any]:
    """data, checked as far as it goes: every key it sets must be valid, but a required key it leaves out
    (a build config's ``sources``, a train config's ``data``) may come from the command's flags, which
    are merged in before the whole config is validated. One UserError otherwise."""
    try:
        cls.model_validate(data)
    except ValidationError as e:
        errors = [err for err in e.errors() if not (err["type"] == "missing" and len(err["loc"]) == 1)]
        if errors:
            raise UserError(f"invalid {what}: "
                            f"{'; '.join(_error_text(cls, err, None, other_names) for err in errors)}") from None
    return data


def yaml_problem(e: Exception) -> str:
    """A PyYAML error in one line: where (1-based line and column), what, and in what construct.

    PyYAML's own text spreads over lines, with an excerpt and a caret for each place."""
    def at(mark: Any) -> str:
        return f"line {mark.line + 1}, column {mark.column + 1}"

    problem, mark = getattr(e, "problem", None), getattr(e, "problem_mark", None)
    if not problem or mark is None:
        return " ".join(str(e).split())
    out = f"{at(mark)}: {problem}"
    context, context_mark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context:
        out += f" ({context}{f' at {at(context_mark)}' if context_mark is not None else ''})"
    return out


def _unique_key_loader(yaml: Any) -> type:
    """PyYAML's safe loader that refuses a key repeated in one mapping, at any depth (plain PyYAML keeps
    the last and drops the earlier silently: a second ``optim:`` section replaced the first). Merged
    keys (``<<: *base``) may still be overridden, as YAML intends."""
    from yaml.constructor import ConstructorError

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            first: dict[Any, Any] = {}
            for key_node, _ in node.value if isinstance(node, yaml.MappingNode) else ():
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = first.get(key)
                except TypeError:  # an unhashable key: PyYAML's own error says so
                    continue
                if seen is not None:
                    raise ConstructorError(None, None, f"duplicate key {key!r} (first on line {seen.line + 1}): "
                                           "write each key once", key_node.start_mark)
                first[key] = key_node.start_mark
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def _refuse_duplicate_json_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, refusing a key given twice (json keeps the last one silently)."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise UserError(f"duplicate key {key!r}: write each key once")
        data[key] = value
    return data


def config_from_bytes(cls: type[M], raw: bytes, where: str, other_names: dict[str, str] | None = None) -> M:
    """A YAML (``where`` ending in .yaml / .yml) or JSON config file's bytes as cls, with one clear error
    (other_names: a key's other names, which an unknown key is answered with)."""
    return parse_config(cls, config_data_from_bytes(cls, raw, where, other_names), what=f"config {where}",
                        other_names=other_names)


def config_data_from_bytes(cls: type[BaseModel], raw: bytes, where: str,
                           other_names: dict[str, str] | None = None) -> dict[str, Any]:
    """A config file's mapping, checked against cls as far as it goes (``check_partial_config``): a file
    may set only some sections and leave the rest, required keys included, to the command's flags."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:  # a config saved in another encoding (Latin-1, UTF-16), or not text
        line = raw[:e.start].count(b"\n") + 1
        raise UserError(f"{where} is not UTF-8 text: byte 0x{raw[e.start]:02x} on line {line} ({e.reason}); "
                        "save it as UTF-8") from None
    # YAML by its name; a name without .json (a pipe: --config <(...)) is YAML unless it reads as a JSON object
    if where.endswith((".yaml", ".yml")) or not where.endswith(".json") and not text.lstrip().startswith("{"):
        try:
            import yaml
        except ImportError:
            raise UserError("reading YAML configs needs PyYAML (pip install pyyaml)") from None
        try:
            data = yaml.load(text, Loader=_unique_key_loader(yaml))  # a safe loader
        except yaml.YAMLError as e:
            raise UserError(f"{where} is not valid YAML: {yaml_problem(e)}") from None
    else:
        try:
            data = json.loads(text, object_pairs_hook=_refuse_duplicate_json_keys)
        except json.JSONDecodeError as e:
            raise UserError(f"{where} is not valid JSON: {e}") from None
        except UserError as e:
            raise UserError(f"{where} is not valid JSON: {e}") from None
    if data is None:
        data = {}  # an empty file, or one of comments only: every setting from the flags and defaults
    if not isinstance(data, dict):
        raise UserError(f"{where}: a config must be a mapping")
    _refuse_the_other_kind(cls, data, where)
    return check_partial_config(cls, data, what=f"config {where}", other_names=other_names)


def _refuse_the_other_kind(cls: type[BaseModel], data: dict[str, Any], where: str) -> None:
    """One short line for a build config given to train (or the other way round), rather than every
    key the command knows: the file's unknown keys are all the other command's sections."""
    kinds = {BuildConfig: "build", TrainConfig: "train"}
    if cls not in kinds:
        return
    other = TrainConfig if cls is BuildConfig else BuildConfig
    unknown = [k for k in data if k not in cls.model_fields]
    if unknown and all(k in other.model_fields for k in unknown):
        raise UserError(f"{where} is a {kinds[other]} config ({', '.join(map(str, unknown[:4]))} are "
                        f"{kinds[other]} settings), not a {kinds[cls]} one: give it to shardforge "
                        f"{kinds[other]} --config")
