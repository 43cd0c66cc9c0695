"""Model prices (USD per million tokens) and the cost of one call.

The shipped table is ``agent/prices.yaml``; a user file (``$KLOOP_PRICES``, else
``~/.config/kernel-loop/prices.yaml``) replaces its entries model by model. An unknown model
costs ``None``: never an error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import structlog
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from agent.providers.base import Usage

log = structlog.get_logger(__name__)

SHIPPED_PRICES = Path(__file__).resolve().parents[1] / "prices.yaml"
PRICES_ENV = "KLOOP_PRICES"
DATE_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")


class PriceTableError(ValueError):
    """A price file could not be read; the message names it."""


class ModelPrice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_usd_per_mtok: float
    output_usd_per_mtok: float
    cached_input_usd_per_mtok: float | None = None
    cache_write_usd_per_mtok: float | None = None

    def cost_usd(self, usage: Usage) -> float:
        cached = min(usage.cached_input_tokens, usage.input_tokens)
        written = min(usage.cache_write_input_tokens, usage.input_tokens - cached)
        uncached = usage.input_tokens - cached - written
        cached_rate = self.input_usd_per_mtok if self.cached_input_usd_per_mtok is None else self.cached_input_usd_per_mtok
        write_rate = self.input_usd_per_mtok if self.cache_write_usd_per_mtok is None else self.cache_write_usd_per_mtok
        total = (uncached * self.input_usd_per_mtok + cached * cached_rate + written * write_rate
                 + usage.output_tokens * self.output_usd_per_mtok)
        return total / 1_000_000


class PriceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: dict[str, ModelPrice] = {}


class PriceTable:
    """Prices by model id; ``lookup`` tries provider-qualified ids first, then bare ones, then
    the id without a date suffix."""

    def __init__(self, prices: dict[str, ModelPrice]):
        self.prices = dict(prices)

    def lookup(self, provider: str, *model_ids: str | None) -> ModelPrice | None:
        ids = [m for m in model_ids if m]
        candidates = [f"{provider}:{m}" for m in ids] + ids + [DATE_SUFFIX.sub("", m) for m in ids]
        for key in candidates:
            if key in self.prices:
                return self.prices[key]
        return None

    def cost_usd(self, usage: Usage, provider: str, *model_ids: str | None) -> float | None:
        price = self.lookup(provider, *model_ids)
        if price is None:
            log.debug("no price for model; cost unknown", provider=provider, models=[m for m in model_ids if m])
            return None
        return price.cost_usd(usage)


def read_price_file(path: Path) -> dict[str, ModelPrice]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
        return PriceFile.model_validate(data).models
    except OSError as error:
        raise PriceTableError(f"cannot read the price file {path}: {error}") from None
    except (yaml.YAMLError, ValidationError) as error:
        raise PriceTableError(f"the price file {path} is not a valid price table (see agent/prices.yaml for the "
                              f"format): {error}") from None


def user_price_file() -> Path | None:
    """``$KLOOP_PRICES`` (which must exist), else ``~/.config/kernel-loop/prices.yaml`` if present."""
    explicit = os.environ.get(PRICES_ENV)
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise PriceTableError(f"{PRICES_ENV}={explicit} names no file; fix or unset it")
        return path
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    path = config_home / "kernel-loop" / "prices.yaml"
    return path if path.is_file() else None


def load_prices(user_file: Path | None = None) -> PriceTable:
    """The shipped table with the user's file on top."""
    prices = read_price_file(SHIPPED_PRICES)
    override = user_file or user_price_file()
    if override is not None:
        prices.update(read_price_file(override))
        log.debug("price overrides loaded", path=str(override))
    return PriceTable(prices)
