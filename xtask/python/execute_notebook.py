"""Execute a notebook with a Jupyter kernel and write the executed copy.

Usage: execute_notebook.py KERNEL TIMEOUT_SECONDS INPUT.ipynb OUTPUT.ipynb [PREAMBLE]

With PREAMBLE, the first code cell's source is replaced by it before the
notebook runs (the test command puts a `:build_env` line before the
notebook's own `:dep` lines, so that the cells link the library as the
chapters were built instead of evcxr compiling it again; see `BuiltLibrary`
in xtask/src/notebook.rs). The input file is not changed.

This is nbclient's executor with one change. evcxr forwards a cell's
printed lines to Jupyter from a separate thread, so the last lines of a
cell can reach the IOPub channel just after the kernel has reported the
cell finished ("idle"); nbclient stops listening at "idle" and would
drop them (evcxr issue #353). Here the client keeps listening after
"idle" until the channel has been quiet for QUIET seconds, and adds any
late output of the same cell in the order it arrives.
"""

import asyncio
import os
import sys
from queue import Empty

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionComplete, CellExecutionError
from nbclient.util import ensure_async

QUIET = 0.1


class LateOutputClient(NotebookClient):
    async def _async_poll_output_msg(self, parent_msg_id, cell, cell_index):
        assert self.kc is not None
        complete = False
        while True:
            try:
                timeout = QUIET if complete else None
                msg = await ensure_async(self.kc.iopub_channel.get_msg(timeout=timeout))
            except Empty:
                return
            if msg["parent_header"].get("msg_id") != parent_msg_id:
                continue
            try:
                self.process_message(msg, cell, cell_index)
            except CellExecutionComplete:
                complete = True


def main():
    kernel, timeout, source, target = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    preamble = sys.argv[5] if len(sys.argv) > 5 else None
    notebook = nbformat.read(source, as_version=4)
    if preamble is not None:
        first = next(cell for cell in notebook.cells if cell.cell_type == "code")
        first.source = preamble
    # the kernel runs in the notebook's folder, as under `jupyter nbconvert`
    resources = {"metadata": {"path": os.path.dirname(os.path.abspath(source))}}
    client = LateOutputClient(notebook, kernel_name=kernel, timeout=timeout, resources=resources)
    try:
        asyncio.run(client.async_execute())
    except CellExecutionError as error:
        nbformat.write(notebook, target)
        sys.exit(f"a cell raised an error:\n{error}")
    nbformat.write(notebook, target)


if __name__ == "__main__":
    main()
