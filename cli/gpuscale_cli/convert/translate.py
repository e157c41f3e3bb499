"""HPA and KEDA ScaledObject objects in, GPUScaler objects and explanations out. Pure.

Every conversion says what was and was not carried over, so nothing is dropped silently."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .conversion import HPA_VERSIONS, KEDA_API_PREFIX
from .conversion import Conversion as Conversion
from .hpa import convert_hpa as convert_hpa
from .keda import convert_scaled_object as convert_scaled_object
from .readers import parse_quantity as parse_quantity
from .readers import source_of

# --- documents -----------------------------------------------------------------------------------


def convert_document(doc: Any) -> list[Conversion]:
    """One YAML document: an HPA, a ScaledObject, a List of them, or something to skip (said so)."""
    if doc is None:
        return []
    if not isinstance(doc, Mapping):
        return [
            Conversion(
                f"a {type(doc).__name__} document",
                unmapped=["not a Kubernetes object; skipped"],
                autoscaler=False,
            )
        ]
    kind = doc.get("kind")
    api_version = str(doc.get("apiVersion", ""))
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        return [c for item in doc["items"] for c in convert_document(item)]
    if kind == "HorizontalPodAutoscaler" and api_version in HPA_VERSIONS:
        return [convert_hpa(doc)]
    if kind == "ScaledObject" and api_version.startswith(KEDA_API_PREFIX):
        return [convert_scaled_object(doc)]
    if kind in ("HorizontalPodAutoscaler", "ScaledObject"):
        return [Conversion(source_of(doc), error=f"apiVersion {api_version!r} is not one gpuscale reads")]
    what = (
        "ScaledJob: KEDA's jobs are not a scalable workload"
        if kind == "ScaledJob"
        else "not an HPA or ScaledObject"
    )
    return [Conversion(source_of(doc), unmapped=[f"{what}; skipped"], autoscaler=False)]


def convert_documents(docs: list[Any]) -> list[Conversion]:
    """Every document's conversions, with clashes between the results said."""
    conversions = [c for doc in docs for c in convert_document(doc)]
    names: dict[tuple[str, str], str] = {}
    targets: dict[tuple[str, str, str], str] = {}
    for conv in conversions:
        if conv.gpuscaler is None:
            continue
        meta, spec = conv.gpuscaler["metadata"], conv.gpuscaler["spec"]
        ns = meta.get("namespace", "")
        ref = spec["scaleTargetRef"]
        name_key = (ns, meta["name"])
        target_key = (ns, ref["kind"], ref["name"])
        if name_key in names:
            conv.unmapped.append(
                f"GPUScaler {meta['name']} is also the name converted from {names[name_key]}: applying "
                "both keeps only the last; rename one"
            )
        if target_key in targets:
            conv.unmapped.append(
                f"{ref['kind']}/{ref['name']} is also scaled by the GPUScaler from {targets[target_key]}: "
                "two GPUScalers on one target are reported as a conflict; merge their metrics"
            )
        names.setdefault(name_key, conv.source)
        targets.setdefault(target_key, conv.source)
    return conversions
