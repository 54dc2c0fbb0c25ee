"""Named training recipes (the papers' settings) and how a train config is resolved.

A recipe is a YAML file beside this module (package data: an installed wheel has
them): a partial TrainConfig with the model shape, masking scheme, optimizer,
schedule and batch of a paper, plus ``packing_rules``, the packing rule(s) the
corpus must have been built with. docs/recipes.md lists each with its source.

Resolution order, later wins: recipe -> ``--config`` file -> command-line flags ->
``--set key=value`` (every field, dotted for sections: ``--set optim.lr=1e-4``).
A ``--set`` key that is not a field is one line naming the closest valid keys.
"""

from __future__ import annotations

import difflib
import json
import typing
from importlib import resources
from typing import Any

from pydantic import BaseModel

from schemas.config import TrainConfig
from schemas.configfile import key_named, parse_config
from schemas.errors import UserError
from schemas.manifest import Manifest
from shardforge.storage import redact_url
from shardforge.storage.contract import load_config, repack_hint

# Printed in place of the corpus when --print-config runs without --data.
NO_DATA = "(no --data given)"


def recipe_names() -> list[str]:
    """Every packaged recipe, sorted (file names without .yaml)."""
    return sorted(p.name[:-5] for p in resources.files(__name__).iterdir() if p.name.endswith(".yaml"))


def recipe_text(name: str) -> str:
    """The YAML text of a packaged recipe; UserError naming the recipes when there is no such one."""
    names = recipe_names()
    if name not in names:
        close = difflib.get_close_matches(name.lower().replace("_", "-"), names, n=1)  # RoBERTa_Base too
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UserError(f"unknown recipe {name!r}{hint}; recipes: {', '.join(names)}")
    return resources.files(__name__).joinpath(f"{name}.yaml").read_text(encoding="utf-8")


def load_recipe(name: str) -> dict[str, Any]:
    """A recipe as a config mapping, with ``recipe`` set to its name."""
    import yaml

    data = yaml.safe_load(recipe_text(name)) or {}
    if not isinstance(data, dict):
        raise UserError(f"recipe {name}: a recipe must be a mapping")
    data["recipe"] = name
    return data


# ------------------------------------------------------------------ --set

def _section(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """(the config section a field holds, whether it may be null instead): ``MaskingConfig | None`` is one."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    args = typing.get_args(annotation)
    models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
    if len(models) == 1 and type(None) in args:
        return models[0], True
    return None, False


def valid_keys(model: type[BaseModel] = TrainConfig, prefix: str = "") -> list[str]:
    """Every settable dotted key of a config model (sections expanded), in declaration order. A section that
    may be null (``eval_masking``) is a key itself (``eval_masking=null``) and has its dotted keys too: one set
    on a null section starts it from the section's defaults."""
    keys: list[str] = []
    for name, field in model.model_fields.items():
        section, nullable = _section(field.annotation)
        if section is None or nullable:
            keys.append(prefix + name)
        if section is not None:
            keys.extend(valid_keys(section, f"{prefix}{name}."))
    return keys


SHOWN_KEYS = 8  # the closest keys an unknown --set key's line names (--help lists all ~90)


def closest_first(key: str, keys: list[str]) -> list[str]:
    """keys sorted by similarity to key (most similar first; ties keep their order)."""
    def score(k: str) -> float:
        # The last part matters most (optim.lrr -> optim.lr), then the whole dotted key.
        last = difflib.SequenceMatcher(None, key.rsplit(".", 1)[-1], k.rsplit(".", 1)[-1]).ratio()
        return max(difflib.SequenceMatcher(None, key, k).ratio(), 0.9 * last)

    return sorted(keys, key=score, reverse=True)


def parse_value(v: str) -> Any:
    """A --set value: JSON when it parses (numbers, true/false, null, lists), else the string."""
    try:
        return json.loads(v)
    except json.JSONDecodeError:
        return v


def apply_set(data: dict[str, Any], item: str, other_names: dict[str, str] | None = None) -> None:
    """Apply one ``key=value`` override to a config mapping; UserError for a malformed item or unknown key
    (other_names: a key's other names, ``learning_rate`` -> ``optim.lr``: the line names the key)."""
    if "=" not in item:
        raise UserError(f"--set expects key=value, got {item!r}")
    key, value = item.split("=", 1)
    keys = valid_keys()
    if key not in keys:
        named = key_named(key, other_names, keys.__contains__)
        if named:
            raise UserError(f"--set {item}: unknown key {key!r}; the key for that is {named} (--set {named}={value})")
        ranked = closest_first(key, keys)[:SHOWN_KEYS]
        raise UserError(f"--set {item}: unknown key {key!r}; the closest valid keys: {', '.join(ranked)} "
                        "(python -m trainer.train --help lists every one)")
    node = data
    parts = key.split(".")
    for p in parts[:-1]:
        child = node.get(p)
        if not isinstance(child, dict):
            child = node[p] = {}
        node = child
    node[parts[-1]] = parse_value(value)


# ------------------------------------------------------------------ resolution

def resolve_train_config(recipe: str | None, config_url: str | None, flags: dict[str, Any],
                         overrides: list[str], require_data: bool = True,
                         flag_names: dict[str, str] | None = None,
                         other_names: dict[str, str] | None = None) -> TrainConfig:
    """The train config from a recipe, a config file, flags (None: not given) and --set items.

    require_data=False (``--print-config``) accepts a missing --data and fills NO_DATA.
    flag_names: config key -> the flag that set it, to name the flag in an error about its value.
    other_names: a key's other names (``learning_rate`` -> ``optim.lr``), which an unknown key in the config
    file or a --set item is answered with.
    """
    from shardforge.storage import absolute

    data: dict[str, Any] = load_recipe(recipe) if recipe else {}
    if config_url:
        from_file = load_config(TrainConfig, config_url, other_names).model_dump(exclude_unset=True)
        _size_replaces_shape(data, set(from_file.get("model") or {}))
        _merge(data, from_file)
    if flags.get("mix") and flags.get("data") is None:
        data.pop("data", None)  # a corpus from the recipe or config file gives way to --mix
    for k, v in flags.items():
        if v is not None:
            data[k] = v
    _size_replaces_shape(data, {item.split("=", 1)[0].strip()[len("model."):] for item in overrides
                                if item.strip().startswith("model.")})
    for item in overrides:  # --set model.size=base --set masking.scheme=span
        apply_set(data, item, other_names)
    # Checkpoints record the config: relative paths would only resolve from this directory.
    for m in data.get("mix") or []:
        m["data"] = absolute(str(m["data"]))
    if data.get("mix") and data.get("data") is None:
        data["data"] = data["mix"][0]["data"]  # the first source stands for the run's corpus
    if data.get("init"):
        data["init"] = absolute(str(data["init"]))
    if data.get("data") is None:
        if require_data:
            raise UserError("--data URL (the corpus or its manifest.json) is required")
        data["data"] = NO_DATA
    else:
        # Checkpoints record the config: a relative corpus path would only resolve from this directory.
        data["data"] = absolute(str(data["data"]))
    return parse_config(TrainConfig, data, what=f"train config (recipe {recipe})" if recipe else "train config",
                        flags=flag_names, other_names=other_names)


# The model keys a named size (model.size) sets; a recipe sets them all explicitly, so a size given later
# (--model_size tiny, --set model.size=tiny, a config file's model.size) replaces the recipe's shape.
SIZE_KEYS = ("hidden", "layers", "heads", "intermediate")


def _size_replaces_shape(data: dict[str, Any], later_model_keys: set[str]) -> None:
    """Where a later layer of the config sets model.size, drop the shape keys the earlier layers set and it
    does not: an explicit width there always won over the size, so ``--recipe roberta-base --model_size tiny``
    trained a base-sized model that the run's description called tiny."""
    model = data.get("model")
    if "size" in later_model_keys and isinstance(model, dict):
        for key in SIZE_KEYS:
            if key not in later_model_keys:
                model.pop(key, None)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> None:
    """Deep-merge over into base (sections merge key by key; other values replace)."""
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


def config_yaml(cfg: TrainConfig) -> str:
    """The resolved config as YAML (what --print-config prints; loadable again with --config)."""
    import yaml

    data = cfg.model_dump(mode="json")
    head = f"# resolved train config{f' (recipe {cfg.recipe})' if cfg.recipe else ''}\n"
    if data.get("data") == NO_DATA:
        data["data"] = None
        head += "# data: give --data (the corpus or its manifest.json)\n"
    return head + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def check_packing(cfg: TrainConfig, manifest: Manifest, root: str) -> None:
    """UserError when the corpus's packing rule is not one the config's recipe trains on."""
    if cfg.packing_rules is None or manifest.packing_rule in cfg.packing_rules:
        return
    what = f"recipe {cfg.recipe}" if cfg.recipe else "this config"
    want = " or ".join(cfg.packing_rules)
    raise UserError(
        f"{what} trains on a corpus packed as {want}; {redact_url(root)} is packed as {manifest.packing_rule} "
        f"({repack_hint(manifest, root, {'--rule': cfg.packing_rules[0]})}; or --set packing_rules=null to train on it anyway)")
