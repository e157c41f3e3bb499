"""``meta.k8s.io/v1`` Table responses (what ``kubectl get`` prints). Pure."""

from __future__ import annotations

from typing import Any

from gpuscale_kubesim.apiserver.resources import ResourceDef

Obj = dict[str, Any]


def wants_table(accept: str) -> bool:
    return any("as=table" in part.replace(" ", "").lower() for part in accept.split(","))


def table(rd: ResourceDef, items: list[Obj], resource_version: str, now: float, include_object: str) -> Obj:
    columns = rd.table_columns()
    rows = []
    for item in items:
        row: Obj = {"cells": [col.cell(item, now) for col in columns]}
        if include_object == "Object":
            row["object"] = item
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": item.get("metadata", {}),
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [col.definition() for col in columns],
        "rows": rows,
    }
