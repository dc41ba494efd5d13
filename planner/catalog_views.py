"""Catalog entries as pandas tables (for ``planner catalog`` and notebooks)."""

from __future__ import annotations

import pandas as pd

from planner.catalog import Catalog


def catalog_table(catalog: Catalog, kind: str) -> pd.DataFrame:
    """One row per entry of ``kind`` (gpus, models, quantization, prices, engines, quality), sorted."""
    if kind == "gpus":
        rows = []
        for g in catalog.gpus.entries.values():
            row = g.model_dump()
            row["aliases"] = list(g.aliases)
            row["ridge_point_flop_per_byte"] = g.ridge_point_flop_per_byte
            row["default_usd_per_gpu_hour"] = catalog.default_price_usd_per_gpu_hour(g.id)
            rows.append(row)
        return pd.DataFrame(rows).sort_values("id", ignore_index=True)
    if kind == "models":
        rows = [{**m.model_dump(), "aliases": list(m.aliases)} for m in catalog.models.entries.values()]
        return pd.DataFrame(rows).sort_values("id", ignore_index=True)
    if kind == "quantization":
        rows = [{"kind": "weights", **f.model_dump(exclude={"engines"}), "aliases": list(f.aliases)}
                for f in catalog.weight_formats.entries.values()]
        rows += [{"kind": "kv-cache", **k.model_dump(), "aliases": list(k.aliases)}
                 for k in catalog.kv_dtypes.entries.values()]
        return pd.DataFrame(rows).sort_values(["kind", "id"], ignore_index=True)
    if kind == "prices":
        rows = [{"kind": "rental", **p.model_dump()} for p in catalog.prices.rental]
        rows += [{"kind": "purchase", **p.model_dump()} for p in catalog.prices.purchase]
        return pd.DataFrame(rows).sort_values(["kind", "gpu", "offering", "provider"], ignore_index=True,
                                              na_position="first")
    if kind == "engines":
        from planner.compat import engine_table

        table = engine_table(catalog)
        rows = [{**r.model_dump(), "gpus": list(table.architectures[r.architecture])} for r in table.support]
        return pd.DataFrame(rows).sort_values(["engine", "architecture"], ignore_index=True)
    if kind == "quality":
        from planner.quality import quality_table

        doc = quality_table(catalog).doc
        rows = [{"model": n.model, "weight_format": n.weight_format, "kv_cache_dtype": None, "recovery": 1.0,
                 "benchmark": "native format", "checkpoint": None, "source": n.source} for n in doc.native]
        rows += [{**e.model_dump(exclude={"score", "reference_score"}), "recovery": e.recovery_fraction}
                 for e in doc.entries]
        return pd.DataFrame(rows).sort_values(["model", "weight_format"], ignore_index=True)
    raise ValueError(f"unknown catalog kind {kind!r}")
