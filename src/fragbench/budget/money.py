"""Money: reservations, costs and the balance, in Decimal so that sums are exact.

- A call's reservation bounds what it can cost: every UTF-8 byte of its text counted as one token
  (a token is at least one byte), plus the framing tokens, all priced at the highest input-side
  rate (cache write), plus the backend's declared output ceiling at the output rate.
- A call's cost comes from the usage the provider reports (see `cost`).
- The balance is the ceiling, less the prior spend, less what every journal drawing on the same
  budget recorded: a call's cost when its outcome is known, its whole reservation otherwise.
"""

from __future__ import annotations

from decimal import Decimal

import attrs

from fragbench.interfaces import COST_FIELDS, Usage


@attrs.frozen
class Pricing:
    """USD per `per_tokens` tokens, as read on `read_on`; Decimal so sums stay exact."""

    models: tuple[str, ...]
    input: Decimal
    cached_input: Decimal | None
    """None where the table has no cached-input price: the backend's contract must then not
    declare cached tokens (a provider without a cache)."""
    cache_write: Decimal | None
    output: Decimal
    per_tokens: int
    max_input_tokens: int
    """The short-context limit: an input beyond it has no price in this table."""
    read_on: str
    tier: str

    @property
    def highest_input_rate(self) -> Decimal:
        return max(r for r in (self.input, self.cached_input, self.cache_write) if r is not None)


@attrs.frozen
class Budget:
    id: str
    ceiling_usd: Decimal
    prior_spend_usd: Decimal
    framing_tokens: int


def reservation(text_bytes: int, pricing: Pricing, output_ceiling: int,
                framing_tokens: int) -> Decimal:
    input_side = Decimal(text_bytes + framing_tokens) * pricing.highest_input_rate
    output_side = Decimal(output_ceiling) * pricing.output
    return (input_side + output_side) / pricing.per_tokens


class UnknownCost(ValueError):
    """The usage cannot be priced from the frozen table; the message says why."""


def cost(usage: Usage | None, pricing: Pricing, check_context: bool = True,
         usage_fields: frozenset[str] = frozenset(COST_FIELDS)) -> Decimal:
    """(input − cached − cache_write) × input + cached × cached_input + cache_write × cache_write
    + output × output, per `pricing.per_tokens`; reasoning tokens are part of output_tokens.

    The usage docs leave open whether `input_tokens` includes the cache-write tokens. The
    formula (fixed by the collection issue) reads it as the total, as the API documents for
    cached tokens, so both parts are subtracted from it; if they add up to more than the total,
    the usage is inconsistent and the cost unknown rather than guessed. `check_context=False`
    prices an input beyond the short-context limit at the frozen rates anyway: a lower bound,
    used to count an unknown cost at no less than the evidence. A field outside `usage_fields`
    (the backend's contract: the provider has no such concept) is priced as zero when the
    response leaves it out or reports zero; a non-zero value for it is an unknown cost.
    """
    if usage is None:
        raise UnknownCost("the response carries no usage")
    reported = [f for f in COST_FIELDS if f not in usage_fields and getattr(usage, f)]
    if reported:
        # The contract says the provider has no such concept; a response that reports one
        # shows the contract wrong for this server, and pricing it as zero could under-count.
        raise UnknownCost(f"the usage reports {', '.join(reported)}, which the backend's "
                          "contract declares the provider does not have")
    usage = attrs.evolve(usage, **{f: 0 for f in COST_FIELDS if f not in usage_fields})
    fields = {name: getattr(usage, name) for name in COST_FIELDS}
    missing = [name for name, value in fields.items() if value is None]
    if missing:
        raise UnknownCost(f"the usage lacks {', '.join(missing)}")
    negative = [name for name, value in fields.items() if value is not None and value < 0]
    if negative:
        raise UnknownCost(f"the usage has negative {', '.join(negative)}")
    assert usage.input_tokens is not None and usage.cached_tokens is not None
    assert usage.cache_write_tokens is not None and usage.output_tokens is not None
    uncached = usage.input_tokens - usage.cached_tokens - usage.cache_write_tokens
    if uncached < 0:
        raise UnknownCost("cached and cache-write tokens exceed input_tokens")
    if check_context and usage.input_tokens > pricing.max_input_tokens:
        raise UnknownCost(
            f"{usage.input_tokens} input tokens exceed the {pricing.max_input_tokens} of the "
            "frozen short-context pricing"
        )
    total = (
        uncached * pricing.input
        + usage.cached_tokens * _rate(pricing.cached_input)
        + usage.cache_write_tokens * _rate(pricing.cache_write)
        + usage.output_tokens * pricing.output
    )
    return total / pricing.per_tokens


def _rate(rate: Decimal | None) -> Decimal:
    """A rate the table leaves out applies only to a usage field the contract leaves out, which
    is zero (the config refuses a declared field without its rate)."""
    return Decimal(0) if rate is None else rate


def usd(amount: Decimal) -> str:
    """Plain decimal notation (never `0E-6`), exact: what journals and messages show."""
    text = format(amount, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def balance(budget: Budget, spent: Decimal) -> Decimal:
    return budget.ceiling_usd - budget.prior_spend_usd - spent
