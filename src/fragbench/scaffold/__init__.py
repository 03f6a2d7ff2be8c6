"""`fragbench new`: a plugin package or an experiment folder, written from templates.

In: a NAME and a folder. Out: files written whole or not at all (`templates/`: one folder per
plugin kind, `common/`, and `experiment/`). Imports no stage but the corpus (to check the
example case it writes).

- `plugin`: `new_plugin`; `experiment`: `new_experiment`.
"""

from __future__ import annotations

from fragbench.lazy import reexport

__getattr__, __dir__ = reexport(__name__, {
    "new_plugin": "plugin",
    "new_experiment": "experiment",
})
