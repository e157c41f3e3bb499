"""Pure core: values in, values out; no I/O, no clock."""

# Values built on every evaluation are frozen msgspec Structs (built in C, a tenth the cost of a
# frozen dataclass); those that callers copy with dataclasses.replace stay frozen dataclasses.
