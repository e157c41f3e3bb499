"""PATCH bodies: JSON merge patch, strategic merge patch, JSON patch. Pure.

The strategic merge patch knows the merge keys of the lists our kinds use
(containers by name, conditions by type, ...); other lists are replaced, as
the server does for lists without a patch strategy.
"""

from __future__ import annotations

import copy
from typing import Any

from gpuscale_kubesim.apiserver.errors import ApiError, bad_request

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH, APPLY_PATCH)

# field name -> merge key, for lists that strategic merge patch merges.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "conditions": "type",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "tolerations": "key",
    "addresses": "type",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server's evanphx/json-patch applies it: a value set whole (a
    list, or an object where there was none) loses its null members, in lists too."""
    if not isinstance(patch, dict):
        return _prune_nulls(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _prune_nulls(value: Any) -> Any:
    # evanphx/json-patch pruneNulls: null members of objects go; a list keeps its null items.
    if isinstance(value, dict):
        return {k: _prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune_nulls(v) for v in value]
    return copy.deepcopy(value)


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue  # $setElementOrder, $retainKeys: ordering hints we don't need
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS and isinstance(result.get(key), list):
            result[key] = _merge_list(result[key], value, MERGE_KEYS[key])
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = copy.deepcopy(value)
    return result


def _merge_list(current: list[Any], patch: list[Any], key: str) -> list[Any]:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    out = [copy.deepcopy(i) for i in current]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            out.append(copy.deepcopy(item))
            continue
        index = next(
            (
                n
                for n, existing in enumerate(out)
                if isinstance(existing, dict) and existing.get(key) == item[key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
        elif index is None:
            out.append(copy.deepcopy(item))
        else:
            out[index] = strategic_merge_patch(out[index], item)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            raise ApiError(422, f"JSON patch path not found: /{'/'.join(parts)}", "Invalid")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902: add, remove, replace, move, copy, test."""
    if not isinstance(operations, list):
        raise bad_request("a JSON patch is a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid JSON patch operation: {op!r}")
        kind, parts = op["op"], _pointer(str(op["path"]))
        if kind == "test":
            if _walk(doc, parts) != op.get("value"):
                raise ApiError(422, f"JSON patch test failed at {op['path']}", "Invalid")
            continue
        if kind in ("move", "copy"):
            source_parts = _pointer(str(op.get("from", "")))
            value = copy.deepcopy(_walk(doc, source_parts))
            if kind == "move":
                doc = _remove(doc, source_parts)
            doc = _add(doc, parts, value)
        elif kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc = _remove(doc, parts)
        elif kind == "replace":
            _walk(doc, parts)  # must exist
            doc = _remove(doc, parts)
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        else:
            raise bad_request(f"unknown JSON patch operation {kind!r}")
    return doc


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise ApiError(422, f"JSON patch index out of range: {last}", "Invalid")
    else:
        raise ApiError(422, "JSON patch parent is not a container", "Invalid")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return None
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        del parent[int(last)]
    else:
        raise ApiError(422, f"JSON patch path not found: /{'/'.join(parts)}", "Invalid")
    return doc


def media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def unsupported_patch(*, custom: bool) -> ApiError:
    """415 as the API server words it; custom resources take no strategic merge patch."""
    types = (
        [JSON_PATCH, MERGE_PATCH, APPLY_PATCH]
        if custom
        else [JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH]
    )
    return ApiError(
        415,
        f"the body of the request was in an unknown format - accepted media types include: {', '.join(types)}",
        "UnsupportedMediaType",
    )


def apply_patch(target: Any, patch: Any, content_type: str) -> Any:
    """Apply ``patch`` of ``content_type`` (parameters stripped) to ``target``."""
    media = media_type(content_type)
    if media in (MERGE_PATCH, APPLY_PATCH):
        # Server-side apply approximated as a merge: fine for a simulator.
        return merge_patch(target, patch)
    if media == STRATEGIC_MERGE_PATCH:
        return strategic_merge_patch(target, patch)
    if media == JSON_PATCH:
        return json_patch(target, patch)
    raise unsupported_patch(custom=False)
