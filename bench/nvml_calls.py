"""pynvml with every failure turned into a name, and a recorder of each call's value or error."""

from __future__ import annotations

import ctypes
import dataclasses
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from nvml_fields import MIB


class Named(Exception):
    """A failure already named: PYNVML_LACKS_<name>, or an NVML_ERROR_* from a field or metric."""


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def plain(v: Any, depth: int = 0) -> Any:
    """A JSON-able copy of what pynvml returns (ctypes structures, bytes, arrays)."""
    if depth > 6:
        return repr(v)
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace").rstrip("\x00")
    if isinstance(v, ctypes.Structure | ctypes.Union):
        return {name: plain(getattr(v, name), depth + 1) for name, *_ in v._fields_}
    if isinstance(v, ctypes.Array):
        return [plain(x, depth + 1) for x in list(v)[:64]]
    if isinstance(v, ctypes._Pointer | ctypes.c_void_p):
        return f"ptr:{ctypes.cast(v, ctypes.c_void_p).value}"
    if isinstance(v, ctypes._SimpleCData):
        return plain(v.value, depth + 1)
    if isinstance(v, list | tuple):
        return [plain(x, depth + 1) for x in v[:256]]
    if isinstance(v, dict):
        return {str(k): plain(x, depth + 1) for k, x in v.items()}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return plain(dataclasses.asdict(v), depth + 1)
    return repr(v)


class Nvml:
    """pynvml with every failure turned into a name: NVML_ERROR_*, PYNVML_LACKS_*, or the exception."""

    def __init__(self, module: ModuleType) -> None:
        self.m = module
        self._names: dict[int, str] = {}
        for key in sorted(dir(module)):
            if key.startswith("NVML_ERROR_") or key == "NVML_SUCCESS":
                value = getattr(module, key)
                if isinstance(value, int):
                    self._names.setdefault(value, key)

    def const(self, name: str) -> Any:
        if not hasattr(self.m, name):
            raise Named(f"PYNVML_LACKS_{name}")
        return getattr(self.m, name)

    def __call__(self, fn_name: str, *args: Any, **kwargs: Any) -> Any:
        fn = getattr(self.m, fn_name, None)
        if fn is None:
            raise Named(f"PYNVML_LACKS_{fn_name}")
        return fn(*args, **kwargs)

    def error_name(self, e: BaseException) -> str:
        if isinstance(e, Named):
            return str(e)
        if isinstance(e, self.m.NVMLError):
            code = getattr(e, "value", None)
            return self._names.get(code, f"NVML_ERROR_CODE_{code}") if isinstance(code, int) else str(e)
        return f"{type(e).__name__}: {e}"

    def return_name(self, code: int) -> str:
        return self._names.get(int(code), f"NVML_ERROR_CODE_{code}")


class Recorder:
    """One GPU's probe entries: each NVML call timed, its value or error name kept."""

    def __init__(self, nv: Nvml) -> None:
        self.nv = nv
        self.handle: Any = None
        self.entries: list[dict[str, Any]] = []

    def add(self, dcgm: str, call: str, unit: str, fn: Callable[[], Any], note: str = "") -> dict[str, Any]:
        entry: dict[str, Any] = {"dcgm": dcgm, "call": call, "unit": unit}
        t0 = time.perf_counter()
        try:
            raw = fn()
            entry["raw"] = raw
            entry["value"] = plain(raw)
        except Exception as e:  # noqa: BLE001 - a failing call is a result, not a crash
            entry["error"] = self.nv.error_name(e)
        entry["us"] = round((time.perf_counter() - t0) * 1e6, 1)
        if note:
            entry["note"] = note
        self.entries.append(entry)
        return entry

    def call(
        self, dcgm: str, fn_name: str, *args: Any, unit: str = "", note: str = "", system: bool = False
    ) -> dict[str, Any]:
        """fn_name(handle, *args): an argument named NVML_* / nvml* is pynvml's constant of that name."""
        nv = self.nv

        def run() -> Any:
            values = [nv.const(a) if isinstance(a, str) and a.lower().startswith("nvml") else a for a in args]
            return nv(fn_name, *values) if system else nv(fn_name, self.handle, *values)

        label = f"{fn_name}({', '.join(str(a) for a in args)})" if args else fn_name
        return self.add(dcgm, label, unit, run, note)

    def derive(
        self,
        source: dict[str, Any],
        dcgm: str,
        call: str,
        unit: str,
        fn: Callable[[Any], Any],
        note: str = "",
    ) -> None:
        """A row read from an earlier call's result (one NVML call, several counters)."""
        entry: dict[str, Any] = {"dcgm": dcgm, "call": call, "unit": unit, "us": source.get("us")}
        if "error" in source:
            entry["error"] = source["error"]
        else:
            try:
                entry["value"] = plain(fn(source["raw"]))
            except Exception as e:  # noqa: BLE001 - a failing call is a result, not a crash
                entry["error"] = self.nv.error_name(e)
        if note:
            entry["note"] = note
        self.entries.append(entry)

    def field(self, dcgm: str, field_name: str, unit: str, note: str = "") -> None:
        """One NVML field value by itself: its own nvmlReturn and latency."""
        nv = self.nv

        def read() -> Any:
            field_id = nv.const(field_name)
            value = nv("nvmlDeviceGetFieldValues", self.handle, [field_id])[0]
            if value.nvmlReturn != 0:
                raise Named(nv.return_name(value.nvmlReturn))
            return _field_value(value)

        self.add(dcgm, f"nvmlDeviceGetFieldValues({field_name})", unit, read, note)


def _field_value(value: Any) -> Any:
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return getattr(value.value, member.get(int(value.valueType), "ullVal"))


def mib(v: Any) -> float:
    return round(float(v) / MIB, 1)


def mib_of(part: str, struct: Any) -> float:
    return mib(getattr(struct, part))


def item(i: int, seq: Any) -> Any:
    return seq[i]


def event_names(nv: Nvml, mask: int) -> list[str]:
    names = []
    for key in sorted(dir(nv.m)):
        if key.startswith("nvmlEventType") and key not in ("nvmlEventTypeAll", "nvmlEventTypeNone"):
            bit = getattr(nv.m, key)
            if isinstance(bit, int) and bit and mask & bit == bit:
                names.append(key)
    return names
