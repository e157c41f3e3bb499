"""Pure core: values in, values out; no I/O, no clock."""
