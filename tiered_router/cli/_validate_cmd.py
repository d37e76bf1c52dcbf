"""``tiered-router validate``: check a policy, build its router, show what each backend resolves to.

A backend written as ``{preset: mercury-2}`` is shown as the endpoint it becomes: kind, model,
base URL, dialect, tools mode, and its price with where the price comes from (the backend's
own ``price``, the policy's ``prices:``, the preset, or the built-in table), in the text and
in ``--json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tiered_router.cli._policy_cmds import JsonOpt, KeysOpt, PolicyArg

if TYPE_CHECKING:
    from tiered_router.policy import BackendConfig, Policy

__all__ = ["resolved_backend", "validate"]


def _price_source(name: str, config: BackendConfig, policy: Policy) -> tuple[Any, str | None]:
    """The price a backend is billed at, and where it comes from (``None``: no price)."""
    from tiered_router.backends.presets import preset_for
    from tiered_router.pricing import listed_price

    if "price" in config.model_fields_set:
        return config.price, f"backends.{name}.price"
    if config.type != "openai":
        return None, None
    preset = preset_for(config, backend=name)
    model = config.model or (preset.model if preset is not None else None)
    if policy.prices and model in policy.prices:
        return policy.prices[model], f"prices.{model}"
    if preset is None:
        return None, None
    if preset.price is not None:
        return preset.price, f"preset {preset.name}"
    listed = listed_price(preset.name, model)
    if listed is not None:
        return listed, f"built-in price table ({preset.name}, {model})"
    return None, None


def resolved_backend(name: str, config: BackendConfig, policy: Policy) -> dict[str, Any]:
    """Return what a policy's backend resolves to, presets and price table applied.

    Args:
        name: The backend's name in the policy.
        config: Its config.
        policy: The policy (for ``prices:``).

    Returns:
        ``type``, ``preset``, ``kind``, ``model``, ``base_url``, ``dialect``, ``tools``
        (``native`` | ``prompted`` | ``none``; ``None`` for replays), ``price`` (a mapping or
        ``None``) and ``price_source``.

    """
    from tiered_router.backends.presets import dialect_for, preset_for, resolve_config

    price, source = _price_source(name, config, policy)
    out: dict[str, Any] = {
        "type": config.type,
        "preset": None,
        "kind": config.kind or "autoregressive",
        "model": config.model,
        "base_url": None,
        "dialect": None,
        "tools": None,
        "price": price.model_dump() if price is not None else None,
        "price_source": source,
    }
    if config.type == "replay":
        out["model"] = str(config.options.get("outcome_model") or config.model or "") or None
        return out
    if config.type != "openai":
        return out
    preset = preset_for(config, backend=name)
    resolved = resolve_config(config, backend=name, prices=policy.prices)
    dialect = dialect_for(resolved, backend=name)
    out.update(
        preset=preset.name if preset is not None else None,
        kind=resolved.kind or "autoregressive",
        model=resolved.model,
        # no base_url and no preset URL: the openai SDK's default endpoint
        base_url=resolved.base_url or "https://api.openai.com/v1",
        dialect=dialect.name,
        tools=dialect.tools if resolved.tools else "none",
    )
    return out


def _text(name: str, info: dict[str, Any]) -> str:
    price = info["price"]
    cost = (
        f"${price['input_per_mtok']:g} in / ${price['output_per_mtok']:g} out per 1M tokens "
        f"(from {info['price_source']})"
        if price is not None
        else "[yellow]no price: its calls count as $0[/yellow]"
    )
    if info["type"] == "openai":
        preset = f", preset {info['preset']}" if info["preset"] else ""
        where = (
            f"{info['model']} ({info['kind']}) at {info['base_url']}{preset}, "
            f"dialect {info['dialect']}, tools {info['tools']}"
        )
    else:
        where = f"{info['model']} ({info['kind']})"
    return f"  backend {name}: {info['type']} {where}, {cost}"


def validate(
    policy: Path,
    json_out: bool = False,
    check_keys: bool = False,
) -> None:
    """Check a policy and build its router, without calling a model. Exit 1 with file:line errors.

    Loading checks the schema, variables, gate checks and their options, the scorer and
    every backend's type, preset, model and options; then the router is built as ``Router()``
    would build it. Each backend is shown as it resolves (kind, model, base URL, dialect,
    tools mode, price and its source). API keys are checked at a backend's first call: a
    missing one is a note here, or an error with ``--check-keys``.
    """
    from tiered_router.cli._policy_cmds import _console, _errors, _fail, _load, _missing_keys

    with _errors(policy):
        loaded = _load(policy)
        from tiered_router.router import Router

        Router(loaded)  # builds the scorer and the gate; backends at first use
        notes = _missing_keys(loaded)
        backends = {
            name: resolved_backend(name, config, loaded) for name, config in loaded.backends.items()
        }
    if notes and check_keys:
        _fail("\n".join(f"{policy}: {note}" for note in notes))
    summary: dict[str, Any] = {
        "file": str(policy),
        "backends": backends,
        "tiers": {"fast": loaded.tiers.fast, "frontier": loaded.tiers.frontier},
        "scoring": loaded.scoring.type,
        "threshold": loaded.scoring.threshold,
        "rules": [r.name for r in loaded.rules],
        "gate": [c if isinstance(c, str) else next(iter(c)) for c in loaded.gate.checks],
        "notes": notes,
    }
    if json_out:
        typer.echo(json.dumps({"ok": True, **summary}, indent=2))
        return
    out = _console()
    out.print(f"[green]ok[/green] {policy}")
    for name, info in backends.items():
        out.print(_text(name, info))
    out.print(f"  tiers: fast={loaded.tiers.fast} frontier={loaded.tiers.frontier}")
    out.print(f"  scoring: {loaded.scoring.type}, threshold {loaded.scoring.threshold}")
    out.print(f"  rules: {', '.join(summary['rules']) or 'none'}")
    out.print(f"  gate: {', '.join(summary['gate']) or 'none'}")
    for note in notes:
        out.print(f"  [yellow]note[/yellow] {note} (checked at the backend's first call)")


def register(app: typer.Typer) -> None:
    """Add ``validate`` to the app."""

    def validate_command(
        policy: PolicyArg, json_out: JsonOpt = False, check_keys: KeysOpt = False
    ) -> None:
        validate(policy, json_out=json_out, check_keys=check_keys)

    validate_command.__doc__ = validate.__doc__
    app.command("validate")(validate_command)
