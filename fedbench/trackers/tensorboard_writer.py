"""TensorBoard event files from the store, one folder per run, rewritten whole when the store's rows changed."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from fedbench.trackers.rows import RunExport

MARKER = ".fedbench-export.json"  # in a TensorBoard run folder: what it was written from


def _safe(name: str) -> str:
    """A folder name for a scenario or label (characters other than letters, digits, ``._+=-`` → ``_``)."""
    return re.sub(r"[^A-Za-z0-9._+=-]", "_", name) or "_"


class TensorBoardWriter:
    """Event files under ``logdir``, one folder per run: ``<scenario>/<label>/<run id>``."""

    def __init__(self, logdir: str | Path) -> None:
        self.logdir = Path(logdir)

    def run_dir(self, run: RunExport) -> Path:
        return self.logdir / _safe(run.scenario) / _safe(run.algorithm) / run.run_id

    def write(self, run: RunExport) -> bool:
        """Write the run's folder unless it holds these rows already (False then)."""
        folder, digest = self.run_dir(run), run.digest()
        marker = folder / MARKER
        if marker.is_file() and json.loads(marker.read_text()).get("digest") == digest:
            return False
        staging = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        self._events(run, staging)
        (staging / MARKER).write_text(json.dumps({"run_id": run.run_id, "rounds": run.last_round, "digest": digest}))
        shutil.rmtree(folder, ignore_errors=True)
        try:
            staging.rename(folder)
        except OSError:  # another process wrote the folder meanwhile, from the same store
            shutil.rmtree(staging, ignore_errors=True)
        return True

    @staticmethod
    def _events(run: RunExport, folder: Path) -> None:
        """One event file: the scalars per round, the hyper-parameters (HParams plugin) and the spec as text."""
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        writer = SummaryWriter(str(folder))
        try:
            for round_, values in run.rounds:
                for tag, value in values.items():
                    writer.add_scalar(tag, value, global_step=round_)
            last = run.rounds[-1][1] if run.rounds else {}
            final = {c: last[c] for c in ("test_acc", "test_loss", "train_loss") if c in last}
            events = writer._get_file_writer()  # add_hparams' own way: the summaries into this run's file
            for summary in hparams(run.params, final):
                events.add_summary(summary)
            writer.add_text("fedbench/spec", f"```json\n{json.dumps(json.loads(run.spec_json), indent=2)}\n```")
            writer.add_text("fedbench/scenario_hash", run.scenario_hash)
        finally:
            writer.close()
