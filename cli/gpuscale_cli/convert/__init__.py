"""``gpuscale convert``: HPA and KEDA ScaledObject YAML in, GPUScaler YAML out.

:mod:`.promql` reads the queries, :mod:`.signals` names what they measure,
:mod:`.translate` maps objects and explains every choice, :mod:`.render`
writes the YAML with those explanations as comments; all pure. :mod:`.app`
is the shell: read the file, print, exit.
"""
