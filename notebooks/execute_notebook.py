"""Execute one notebook headless with nbclient; exit non-zero if any cell raises.

    python3 notebooks/execute_notebook.py NOTEBOOK.ipynb EXECUTED.ipynb [--cwd DIR] [--timeout S]

The notebook's inputs come from the environment (POWERPERF_NB_*), which the kernel inherits.
The executed copy (outputs included) is written to EXECUTED.ipynb, also when a cell fails, so
the failure can be read there; the notebook itself is not modified. A notebook committed with
outputs is refused: the repository keeps notebooks with cleared outputs.
"""

import argparse
import re
import sys

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("notebook")
    ap.add_argument("executed")
    ap.add_argument("--cwd", default=".")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    a = ap.parse_args()

    nb = nbformat.read(a.notebook, as_version=4)
    with_outputs = [i for i, c in enumerate(nb.cells)
                    if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count"))]
    if with_outputs:
        print(f"{a.notebook}: cells {with_outputs} have outputs; commit notebooks with cleared outputs "
              f"(jupyter nbconvert --clear-output --inplace {a.notebook})", file=sys.stderr)
        return 1

    client = NotebookClient(nb, timeout=a.timeout, kernel_name="python3",
                            resources={"metadata": {"path": a.cwd}})
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError) as e:
        nbformat.write(nb, a.executed)
        msg = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # the traceback without terminal colours
        print(f"{a.notebook}: a cell failed (executed copy: {a.executed})\n{msg}", file=sys.stderr)
        return 1
    nbformat.write(nb, a.executed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
