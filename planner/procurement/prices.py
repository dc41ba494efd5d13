"""Prices of the procurement tiers: rental quotes, purchase quotes, the hourly cost of owning."""

from __future__ import annotations

from dataclasses import dataclass

from planner.procurement.spec import MONTHS_PER_YEAR, BuyOption, RentOption
from planner.units import HOURS_PER_MONTH, KILO


@dataclass(frozen=True)
class PriceQuote:
    value: float | None
    provider: str
    as_of: str
    source: str


def rent_quote(problem, option: RentOption, gpu: str) -> PriceQuote:
    """USD/GPU-h of a rent option: option override, else the problem's override for its
    own offering, else the catalog row (default row, else the cheapest) of the offering."""
    overrides = {problem.catalog.gpu(k).id: v for k, v in option.usd_per_gpu_hour.items()}
    if gpu in overrides:
        return PriceQuote(overrides[gpu], "procurement override", "-", f"{problem.path}: procurement.rent")
    if option.offering == problem.spec.price_offering:
        spec_over = {problem.catalog.gpu(k).id: v for k, v in problem.spec.prices.items()}
        if gpu in spec_over:
            return PriceQuote(spec_over[gpu], "problem override", "-", f"{problem.path}: prices")
    rows = [r for r in problem.catalog.rental_prices(gpu) if r.offering == option.offering]
    row = ([r for r in rows if r.default] or rows or [None])[0]
    if row is None:
        return PriceQuote(None, "-", "-", f"no {option.offering} price in the catalog")
    return PriceQuote(row.usd_per_gpu_hour, row.provider, row.as_of.isoformat(), row.source)


def purchase_quote(problem, buy: BuyOption, gpu: str) -> tuple[PriceQuote, int]:
    """USD per GPU bought and the purchase unit in GPUs (1, or GPUs per server)."""
    row = problem.catalog.purchase_price(gpu)
    ids = {k: problem.catalog.gpu(k).id for k in (*buy.usd_per_gpu, *buy.usd_per_server, *buy.gpus_per_server)}
    per_gpu = {ids[k]: v for k, v in buy.usd_per_gpu.items()}
    per_server = {ids[k]: v for k, v in buy.usd_per_server.items()}
    server_gpus = {ids[k]: v for k, v in buy.gpus_per_server.items()}
    src = ("catalog", row.as_of.isoformat(), row.source) if row else ("-", "-", "no purchase price in the catalog")
    if buy.purchase_unit == "server":
        n = server_gpus.get(gpu) or (row.gpus_per_server if row else None)
        price = per_server.get(gpu) or (row.usd_per_server if row else None)
        if n is None or price is None:
            return PriceQuote(None, *src[:2], f"no server price or size for {gpu}"), 1
        origin = ("procurement override", "-", f"{problem.path}: procurement.buy") if gpu in per_server else src
        return PriceQuote(price / n, *origin), int(n)
    if gpu in per_gpu:
        return PriceQuote(per_gpu[gpu], "procurement override", "-", f"{problem.path}: procurement.buy"), 1
    return PriceQuote(row.usd_per_gpu if row else None, *src), 1


def power_watts(problem, buy: BuyOption, gpu: str) -> float | None:
    """Power per GPU [W]: the override, else the catalog TDP (None when unknown)."""
    over = {problem.catalog.gpu(k).id: v for k, v in buy.power_watts_per_gpu.items()}
    return over.get(gpu, problem.catalog.gpu(gpu).tdp_watts)


def own_costs_per_gpu_hour(usd_per_gpu: float, watts: float, buy: BuyOption) -> dict[str, float]:
    """Hourly cost of owning one GPU, used or not: depreciation, power, hosting [USD/h].

    Notes
    -----
    own = usd_per_gpu / (amortization_years * 8760 h) + watts / 1000 * PUE * usd_per_kwh
    + usd_per_rack_month / gpus_per_rack / 730 h.
    """
    capex = usd_per_gpu / (buy.amortization_years * MONTHS_PER_YEAR * HOURS_PER_MONTH)
    power = watts / KILO * buy.power_usage_effectiveness * buy.usd_per_kwh
    hosting = buy.usd_per_rack_month / buy.gpus_per_rack / HOURS_PER_MONTH
    return {"capex_usd_per_gpu_hour": capex, "power_usd_per_gpu_hour": power,
            "hosting_usd_per_gpu_hour": hosting, "own_usd_per_gpu_hour": capex + power + hosting}
